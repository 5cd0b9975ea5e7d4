#include "sluice/ops/url_storage.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sluice::ops {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;

// AWS's published example of a signed GET Object (S3 API reference, "Signature Calculations
// for the Authorization Header: Transferring Payload in a Single Chunk", Example: GET Object):
// the same key, date, request and headers must give the signature printed there.
TEST(SignS3RequestTest, MatchesAwsPublishedGetObjectExample) {
  S3Config c;
  c.region = "us-east-1";
  c.access_key = "AKIAIOSFODNN7EXAMPLE";
  c.secret_key = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
  const std::vector<std::string> headers = SignS3Request(
      c, "GET", "https://examplebucket.s3.amazonaws.com/test.txt", "20130524T000000Z",
      {{"range", "bytes=0-9"}},
      "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_THAT(headers,
              Contains("Authorization: AWS4-HMAC-SHA256 "
                       "Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
                       "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, "
                       "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"));
}

TEST(RedactUrlTest, DropsUserInfoAndQuery) {
  EXPECT_EQ(RedactUrl("https://alice:pw@host:8443/a/b.tar?X-Amz-Signature=ab#f"),
            "https://host:8443/a/b.tar");
  EXPECT_EQ(RedactUrl("s3://bucket/key.tar"), "s3://bucket/key.tar");
  EXPECT_EQ(RedactUrl("http://host"), "http://host");
}

TEST(S3ConfigTest, ReadsTheSharedCredentialsFileProfile) {
  const std::string file = ::testing::TempDir() + "/sluice-credentials";
  FILE* f = std::fopen(file.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fputs("[default]\naws_access_key_id = A1\naws_secret_access_key = S1\n"
             "[other]\naws_access_key_id=A2\naws_secret_access_key=S2\naws_session_token=T2\n",
             f);
  std::fclose(f);
  unsetenv("AWS_ACCESS_KEY_ID");
  unsetenv("AWS_SECRET_ACCESS_KEY");
  setenv("AWS_SHARED_CREDENTIALS_FILE", file.c_str(), 1);
  setenv("AWS_PROFILE", "other", 1);
  setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9000/", 1);
  const S3Config c = S3ConfigFromEnvironment();
  EXPECT_EQ(c.access_key, "A2");
  EXPECT_EQ(c.secret_key, "S2");
  EXPECT_EQ(c.session_token, "T2");
  EXPECT_EQ(c.endpoint, "http://127.0.0.1:9000");
  unsetenv("AWS_PROFILE");
  EXPECT_EQ(S3ConfigFromEnvironment().access_key, "A1");
  unsetenv("AWS_SHARED_CREDENTIALS_FILE");
  unsetenv("AWS_ENDPOINT_URL");
}

}  // namespace
}  // namespace sluice::ops
