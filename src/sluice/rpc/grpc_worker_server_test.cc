// Sessions over real gRPC on loopback: results, security, limits and flow control.
#include "sluice/rpc/grpc_worker_server.h"

#include <grpcpp/grpcpp.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sluice/pipeline/segment.h"
#include "sluice/rpc/remote_stream.h"
#include "sluice/rpc/rpc_test_util.h"
#include "sluice/rpc/slot_arena.h"
#include "sluice/rpc/worker.grpc.pb.h"

namespace sluice::rpc {
namespace {

using test::TempDir;
using ::testing::HasSubstr;

// A worker on loopback; unless the test chose one, its data root is the temp folder the
// tests' data sets are written under.
std::unique_ptr<GrpcWorkerServer> StartServer(ServerOptions options) {
  options.listen = "127.0.0.1:0";
  if (options.worker.data_root.empty()) {
    options.worker.data_root = std::filesystem::temp_directory_path().string();
  }
  auto server = GrpcWorkerServer::Start(std::move(options));
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? *std::move(server) : nullptr;
}

struct Collected {
  std::vector<Element> elements;
  int splits_done = 0;
  int chunks = 0;  // element events: a chunk each
  int metrics = 0;
  Status failure;
};

// Reads events until `splits` splits are done or the stream fails.
Collected Collect(RemoteStream& stream, int splits) {
  Collected c;
  while (c.splits_done < splits) {
    StreamEvent e = stream.Next();
    if (e.kind == StreamEvent::Kind::kFailed) {
      c.failure = e.status;
      break;
    }
    if (e.kind == StreamEvent::Kind::kElements) {
      ++c.chunks;
      for (Element& el : e.elements) c.elements.push_back(std::move(el));
    } else if (e.kind == StreamEvent::Kind::kSplitDone) {
      ++c.splits_done;
    } else {
      ++c.metrics;
    }
  }
  return c;
}

class GrpcWorkerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    test::WriteJpegs(dir_, 16);
    spec_ = test::ImageSpec(dir_.path() + "/data/**/*.jpg");
  }

  SessionConfig Session(int cut, ReadMode mode = ReadMode::kRemoteRead) const {
    SessionConfig s;
    s.spec = spec_;
    s.cut = cut;
    s.read_mode = mode;
    return s;
  }

  ConnectOptions Connect(const GrpcWorkerServer& server) const {
    ConnectOptions c;
    c.address = server.address();
    return c;
  }

  // Sends the epoch in splits of 8; returns the number of splits.
  int SendEpoch(RemoteStream& stream, ReadMode mode) {
    std::vector<Element> source = test::SourceElements(spec_, 0);
    if (mode == ReadMode::kLocalRead) source = test::RunLocally(spec_, std::move(source), 0, 1);
    int n = 0;
    for (size_t i = 0; i < source.size(); i += 8, ++n) {
      Split split;
      split.split_id = n;
      split.elements.assign(source.begin() + i, source.begin() + std::min(source.size(), i + 8));
      EXPECT_TRUE(stream.SendSplit(std::move(split)).ok());
    }
    return n;
  }

  // Writes a CA and server and client certificates signed by it into dir_/tls.
  void MakeCertificates(const std::string& sub) {
    const std::string d = dir_.path() + "/" + sub;
    const std::string script = absl::StrCat(
        "set -e; mkdir -p ", d, "; cd ", d,
        "; K='-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes'",
        "; openssl req -x509 $K -keyout ca.key -out ca.pem -days 1 -subj /CN=test-ca",
        "; for n in server client; do openssl req $K -keyout $n.key -out $n.csr -subj /CN=$n",
        "; printf 'subjectAltName=IP:127.0.0.1,DNS:localhost' > $n.ext",
        "; openssl x509 -req -in $n.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out $n.pem",
        " -days 1 -extfile $n.ext; done) >/dev/null 2>&1");
    ASSERT_EQ(std::system(("(" + script).c_str()), 0) << "openssl failed";
  }

  TempDir dir_;
  pipeline::PipelineSpec spec_;
};

struct Case {
  int cut;
  ReadMode mode;
  Codec compression;
  bool shared_memory;  // the bulk channel through the shared ring, else over TCP
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << "cut " << CutName(c.cut) << ", " << c.mode << ", " << c.compression << ", "
      << (c.shared_memory ? "shared memory" : "tcp");
}

class GrpcCutTest : public GrpcWorkerTest, public ::testing::WithParamInterface<Case> {};

TEST_P(GrpcCutTest, BitIdenticalToALocalRun) {
  ServerOptions options;
  options.worker.threads = 2;
  auto server = StartServer(options);
  ASSERT_NE(server, nullptr);
  SessionConfig session = Session(GetParam().cut, GetParam().mode);
  session.compression = GetParam().compression;
  ConnectOptions connect = Connect(*server);
  connect.bulk_shared_memory = GetParam().shared_memory;
  auto stream = RemoteStream::Open(connect, session);
  ASSERT_TRUE(stream.ok()) << stream.status();
  EXPECT_TRUE((*stream)->bulk());
  EXPECT_EQ((*stream)->bulk_shared_memory(), GetParam().shared_memory);
  EXPECT_EQ((*stream)->info().version, SluiceVersion());
  EXPECT_EQ((*stream)->info().threads, 2);
  EXPECT_THAT((*stream)->info().ops, ::testing::Contains("decode_jpeg"));
  const int splits = SendEpoch(**stream, GetParam().mode);
  Collected c = Collect(**stream, splits);
  ASSERT_TRUE(c.failure.ok()) << c.failure;
  test::ExpectSameById(test::RunLocally(spec_, test::SourceElements(spec_, 0), 0, GetParam().cut),
                       c.elements);
  EXPECT_GT((*stream)->bytes_received(), 0);
}

INSTANTIATE_TEST_SUITE_P(
    Cuts, GrpcCutTest,
    ::testing::Values(Case{2, ReadMode::kRemoteRead, Codec::kNone, true},
                      Case{5, ReadMode::kRemoteRead, Codec::kLz4, true},
                      Case{kCutAfterBatch, ReadMode::kRemoteRead, Codec::kZstd, true},
                      Case{3, ReadMode::kLocalRead, Codec::kNone, true},
                      Case{kCutAfterBatch, ReadMode::kLocalRead, Codec::kLz4, true},
                      Case{2, ReadMode::kRemoteRead, Codec::kNone, false},
                      Case{5, ReadMode::kRemoteRead, Codec::kLz4, false},
                      Case{kCutAfterBatch, ReadMode::kRemoteRead, Codec::kZstd, false},
                      Case{3, ReadMode::kLocalRead, Codec::kNone, false},
                      Case{kCutAfterBatch, ReadMode::kLocalRead, Codec::kLz4, false}),
    [](const ::testing::TestParamInfo<Case>& info) {
      return absl::StrCat("cut_", CutName(info.param.cut), "_", ReadModeName(info.param.mode), "_",
                          CodecName(info.param.compression),
                          info.param.shared_memory ? "_shm" : "_tcp");
    });

// At the pipeline's end through the shared ring, the worker writes the images into the
// trainer's shared slots (rpc/slot_arena.h) and the chunks name them: the elements are those
// of a local run, bit for bit, and regions come back and are written again once the trainer
// drops what it received. A worker started without shared slots sends every byte, the same.
TEST_F(GrpcWorkerTest, SharedSlotsCarryTheImagesAndAreReusedOnceReleased) {
  // Images of 300 KB, larger than the smallest chunk (WorkerSession::kMinChunkBytes).
  spec_.ops[2] = {"random_resized_crop", {{"size", std::vector<int64_t>{160, 160}}}};
  auto built = pipeline::BuildOps(spec_.ops, spec_.source.seed, ops::Registry::Builtin(),
                                  pipeline::SourceSchema(spec_.source));
  ASSERT_TRUE(built.ok()) << built.status();
  const int end = static_cast<int>(spec_.ops.size());
  const std::vector<Element> expected = test::RunLocally(spec_, test::SourceElements(spec_, 0), 0, end);
  for (const bool offered : {true, false}) {
    ServerOptions options;
    options.worker.threads = 2;
    options.shared_slots = offered;
    auto server = StartServer(options);
    ASSERT_NE(server, nullptr);
    SessionConfig session = Session(end);
    session.land_slots = pipeline::BatchSlotsFor(built->output_schema, spec_.batch.size);
    auto stream = RemoteStream::Open(Connect(*server), session);
    ASSERT_TRUE(stream.ok()) << stream.status();
    ASSERT_TRUE((*stream)->bulk_shared_memory());
    // Three epochs, each dropped once received: 48 images through 5 regions of 4 slots.
    for (int epoch = 0; epoch < 3; ++epoch) {
      const int splits = SendEpoch(**stream, ReadMode::kRemoteRead);
      Collected c = Collect(**stream, splits);
      ASSERT_TRUE(c.failure.ok()) << c.failure;
      test::ExpectSameById(expected, c.elements);
      // A chunk of named slots carries few bytes and so many samples: not one a chunk.
      EXPECT_LE(c.chunks, static_cast<int>(c.elements.size()) / 2) << "epoch " << epoch;
    }
    if (offered) {
      EXPECT_GT((*stream)->shared_slots_received(), kSlotArenaRegions * spec_.batch.size)
          << "regions were written again after the trainer released them";
    } else {
      EXPECT_EQ((*stream)->shared_slots_received(), 0);
    }
  }
}

// The payloads come on the bulk data channel (rpc/bulk_channel.h) when the worker offers it
// and the trainer asks, every one of them (the trainer says it connected before its first
// split), with the same elements as on the stream; a trainer that does not ask, and a
// worker that does not offer, keep them on the stream. On one machine the channel is the
// shared-memory ring unless either side turns it off.
TEST_F(GrpcWorkerTest, PayloadsComeOnTheBulkChannelWhereBothSidesTakeIt) {
  const std::vector<Element> want =
      test::RunLocally(spec_, test::SourceElements(spec_, 0), 0, kCutAfterBatch);
  ServerOptions offering;
  auto server = StartServer(offering);
  ASSERT_NE(server, nullptr);
  EXPECT_GT(server->bulk_port(), 0);
  ServerOptions plain;
  plain.bulk = false;
  auto no_bulk = StartServer(plain);
  ASSERT_NE(no_bulk, nullptr);
  EXPECT_EQ(no_bulk->bulk_port(), 0);
  ServerOptions tcp_only;
  tcp_only.bulk_shared_memory = false;
  auto no_ring = StartServer(tcp_only);
  ASSERT_NE(no_ring, nullptr);
  struct Way {
    GrpcWorkerServer* server;
    bool ask;
    bool ask_ring;
    bool bulk;
    bool ring;
  };
  for (const Way& way : {Way{server.get(), true, true, true, true},
                         Way{server.get(), true, false, true, false},
                         Way{no_ring.get(), true, true, true, false},
                         Way{server.get(), false, true, false, false},
                         Way{no_bulk.get(), true, true, false, false}}) {
    SCOPED_TRACE(::testing::Message()
                 << "offered " << (way.server != no_bulk.get()) << ", asked " << way.ask
                 << ", ring offered " << (way.server == server.get()) << ", ring asked "
                 << way.ask_ring);
    ConnectOptions connect = Connect(*way.server);
    connect.bulk = way.ask;
    connect.bulk_shared_memory = way.ask_ring;
    auto stream = RemoteStream::Open(connect, Session(kCutAfterBatch));
    ASSERT_TRUE(stream.ok()) << stream.status();
    Collected c = Collect(**stream, SendEpoch(**stream, ReadMode::kRemoteRead));
    ASSERT_TRUE(c.failure.ok()) << c.failure;
    test::ExpectSameById(want, c.elements);
    EXPECT_EQ((*stream)->bulk(), way.bulk);
    EXPECT_EQ((*stream)->bulk_shared_memory(), way.ring);
    if (way.bulk) {
      // Every payload: all but the chunks' headers.
      EXPECT_GT((*stream)->bulk_bytes_received(), 0.9 * (*stream)->bytes_received());
    } else {
      EXPECT_EQ((*stream)->bulk_bytes_received(), 0);
    }
  }
}

TEST_F(GrpcWorkerTest, RequiresTheBearerToken) {
  ServerOptions options;
  options.token = "s3cret-token";
  auto server = StartServer(options);
  ASSERT_NE(server, nullptr);
  ConnectOptions connect = Connect(*server);
  auto missing = RemoteStream::Open(connect, Session(2));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("missing bearer token"));
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr(server->address()));
  connect.token = "guess";
  auto wrong = RemoteStream::Open(connect, Session(2));
  ASSERT_FALSE(wrong.ok());
  EXPECT_THAT(std::string(wrong.status().message()), HasSubstr("wrong bearer token"));
  connect.token = "s3cret-token";
  auto right = RemoteStream::Open(connect, Session(2));
  ASSERT_TRUE(right.ok()) << right.status();
  Collected c = Collect(**right, SendEpoch(**right, ReadMode::kRemoteRead));
  EXPECT_TRUE(c.failure.ok()) << c.failure;
  EXPECT_EQ(c.elements.size(), 16u);
  // Its bulk channel's key came on the authenticated stream.
  EXPECT_TRUE((*right)->bulk());
}

TEST_F(GrpcWorkerTest, ServesTlsChecksTheNameAndRejectsAClientWithoutTheCa) {
  MakeCertificates("tls");
  MakeCertificates("other");
  const std::string d = dir_.path() + "/tls/";
  ServerOptions options;
  options.tls_cert_file = d + "server.pem";
  options.tls_key_file = d + "server.key";
  auto server = StartServer(options);
  ASSERT_NE(server, nullptr);
  ConnectOptions connect = Connect(*server);
  connect.connect_timeout_s = 2;
  connect.tls_ca_file = d + "ca.pem";
  auto good = RemoteStream::Open(connect, Session(2));
  ASSERT_TRUE(good.ok()) << good.status();
  Collected c = Collect(**good, SendEpoch(**good, ReadMode::kRemoteRead));
  EXPECT_TRUE(c.failure.ok()) << c.failure;
  // No bulk data channel beside TLS: its bytes would not be encrypted.
  EXPECT_EQ(server->bulk_port(), 0);
  EXPECT_FALSE((*good)->bulk());

  // A worker found by name (dns:NAME:PORT) is reached at its address but checked against
  // the name (ConnectOptions::tls_server_name): the certificate names localhost only.
  connect.tls_server_name = "localhost";
  auto by_name = RemoteStream::Open(connect, Session(2));
  ASSERT_TRUE(by_name.ok()) << by_name.status();
  connect.tls_server_name = "elsewhere";
  auto wrong_name = RemoteStream::Open(connect, Session(2));
  ASSERT_FALSE(wrong_name.ok());
  EXPECT_THAT(std::string(wrong_name.status().message()), HasSubstr(server->address()));
  connect.tls_server_name.clear();

  connect.tls_ca_file = dir_.path() + "/other/ca.pem";  // trusts another CA
  auto other = RemoteStream::Open(connect, Session(2));
  ASSERT_FALSE(other.ok());
  EXPECT_THAT(std::string(other.status().message()), HasSubstr("TLS handshake failed"));
  EXPECT_THAT(std::string(other.status().message()), HasSubstr(server->address()));

  connect.tls_ca_file.clear();  // plaintext against a TLS server
  auto plain = RemoteStream::Open(connect, Session(2));
  ASSERT_FALSE(plain.ok());
  EXPECT_THAT(std::string(plain.status().message()), HasSubstr(server->address()));
}

TEST_F(GrpcWorkerTest, MutualTlsRequiresAClientCertificate) {
  MakeCertificates("tls");
  const std::string d = dir_.path() + "/tls/";
  ServerOptions options;
  options.tls_cert_file = d + "server.pem";
  options.tls_key_file = d + "server.key";
  options.tls_client_ca_file = d + "ca.pem";
  auto server = StartServer(options);
  ASSERT_NE(server, nullptr);
  ConnectOptions connect = Connect(*server);
  connect.connect_timeout_s = 2;
  connect.tls_ca_file = d + "ca.pem";
  auto anonymous = RemoteStream::Open(connect, Session(2));
  ASSERT_FALSE(anonymous.ok());
  EXPECT_THAT(std::string(anonymous.status().message()), HasSubstr(server->address()));
  // Not gRPC's bare "Socket closed": what happened and what to do.
  EXPECT_THAT(std::string(anonymous.status().message()), HasSubstr("refused the TLS handshake"));
  EXPECT_THAT(std::string(anonymous.status().message()),
              HasSubstr("requires a client certificate"));
  EXPECT_THAT(std::string(anonymous.status().message()), HasSubstr("--tls-cert and --tls-key"));
  connect.tls_cert_file = d + "client.pem";
  connect.tls_key_file = d + "client.key";
  auto good = RemoteStream::Open(connect, Session(2));
  ASSERT_TRUE(good.ok()) << good.status();
  Collected c = Collect(**good, SendEpoch(**good, ReadMode::kRemoteRead));
  EXPECT_TRUE(c.failure.ok()) << c.failure;
}

TEST_F(GrpcWorkerTest, MutualTlsWithAClientCertificateOfAnotherCaSaysSo) {
  MakeCertificates("tls");
  MakeCertificates("other");
  const std::string d = dir_.path() + "/tls/";
  ServerOptions options;
  options.tls_cert_file = d + "server.pem";
  options.tls_key_file = d + "server.key";
  options.tls_client_ca_file = d + "ca.pem";
  auto server = StartServer(options);
  ASSERT_NE(server, nullptr);
  ConnectOptions connect = Connect(*server);
  connect.connect_timeout_s = 2;
  connect.tls_ca_file = d + "ca.pem";
  connect.tls_cert_file = dir_.path() + "/other/client.pem";  // signed by a CA it does not know
  connect.tls_key_file = dir_.path() + "/other/client.key";
  auto stranger = RemoteStream::Open(connect, Session(2));
  ASSERT_FALSE(stranger.ok());
  EXPECT_THAT(std::string(stranger.status().message()), HasSubstr(server->address()));
  EXPECT_THAT(std::string(stranger.status().message()),
              HasSubstr("does not trust the client certificate"));
}

// The worker checks its TLS files before listening, naming the flag and the file.
TEST_F(GrpcWorkerTest, UnreadableOrMismatchedTlsFilesAreNamed) {
  MakeCertificates("tls");
  const std::string d = dir_.path() + "/tls/";
  const std::string garbage = dir_.Write("garbage.pem", "this is not PEM\n");
  struct Case {
    std::string cert, key, ca;
    std::string error;
  };
  const std::vector<Case> cases = {
      {d + "missing.pem", d + "server.key", "",
       "--tls-cert " + d + "missing.pem: cannot read it: No such file or directory"},
      {garbage, d + "server.key", "", "--tls-cert " + garbage + ": no PEM certificate in it"},
      {d + "server.pem", garbage, "", "--tls-key " + garbage + ": no unencrypted PEM private key"},
      {d + "server.pem", d + "client.key", "",
       "--tls-key " + d + "client.key does not match the certificate in --tls-cert " + d +
           "server.pem"},
      {d + "server.pem", d + "server.key", garbage,
       "--tls-client-ca " + garbage + ": no PEM certificate in it"},
  };
  for (const Case& c : cases) {
    ServerOptions options;
    options.listen = "127.0.0.1:0";
    options.tls_cert_file = c.cert;
    options.tls_key_file = c.key;
    options.tls_client_ca_file = c.ca;
    auto server = GrpcWorkerServer::Start(options);
    ASSERT_FALSE(server.ok()) << c.error;
    EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument) << server.status();
    EXPECT_THAT(std::string(server.status().message()), HasSubstr(c.error));
    EXPECT_THAT(std::string(server.status().message()), ::testing::Not(HasSubstr("address")));
  }
}

// Polls `condition` every 10 ms for up to `seconds` (a bound for failures, not a timing).
template <typename F>
bool WaitUntil(F condition, double seconds = 60) {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return condition();
}

TEST_F(GrpcWorkerTest, StreamsWithoutAnOpenAreCapped) {
  ServerOptions options;
  options.max_pending_streams = 2;
  options.open_timeout_s = 600;  // not part of this test
  auto server = StartServer(options);
  ASSERT_NE(server, nullptr);
  auto channel = grpc::CreateChannel(server->address(), grpc::InsecureChannelCredentials());
  auto stub = proto::Worker::NewStub(channel);
  grpc::ClientContext ctx[3];
  auto first = stub->Process(&ctx[0]);
  auto second = stub->Process(&ctx[1]);
  ASSERT_TRUE(WaitUntil([&] { return server->pending_streams() == 2; }))
      << server->pending_streams();
  auto third = stub->Process(&ctx[2]);
  proto::WorkerMessage reply;
  EXPECT_FALSE(third->Read(&reply));
  const grpc::Status refused = third->Finish();
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(refused.error_message(),
            "worker has 2 streams waiting for their Open message (--max-pending-streams 2); "
            "refusing another: try again later");
  // Through the trainer's client, the same message names the worker.
  auto stream = RemoteStream::Open(Connect(*server), Session(2));
  ASSERT_FALSE(stream.ok());
  EXPECT_EQ(stream.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(stream.status().message()),
              HasSubstr(absl::StrCat("worker ", server->address(), ": worker has 2 streams")));
  // Once one of them sends its Open, a slot frees up.
  proto::ClientMessage open;
  open.mutable_open()->set_spec_json(pipeline::ToCanonicalJson(spec_));
  open.mutable_open()->set_cut(2);
  open.mutable_open()->set_client_version(SluiceVersion());
  ASSERT_TRUE(first->Write(open));
  ASSERT_TRUE(first->Read(&reply));
  EXPECT_TRUE(reply.has_opened());
  EXPECT_EQ(server->pending_streams(), 1);
  auto good = RemoteStream::Open(Connect(*server), Session(2));
  EXPECT_TRUE(good.ok()) << good.status();
  ctx[0].TryCancel();
  ctx[1].TryCancel();
}

TEST_F(GrpcWorkerTest, StreamsWithoutAnOpenAreClosedAfterTheOpenTimeout) {
  ServerOptions options;
  options.open_timeout_s = 0.2;
  auto server = StartServer(options);
  ASSERT_NE(server, nullptr);
  auto channel = grpc::CreateChannel(server->address(), grpc::InsecureChannelCredentials());
  auto stub = proto::Worker::NewStub(channel);
  grpc::ClientContext ctx;
  auto idle = stub->Process(&ctx);
  // The stream is closed by the worker (whatever the test's own pace): Read returns.
  proto::WorkerMessage reply;
  EXPECT_FALSE(idle->Read(&reply));
  const grpc::Status status = idle->Finish();
  EXPECT_FALSE(status.ok());
  EXPECT_TRUE(WaitUntil([&] { return server->pending_streams() == 0; }));
}

TEST_F(GrpcWorkerTest, ASilentTrainerLosesItsSessionAfterTheLease) {
  ServerOptions options;
  options.worker.session_lease_s = 0.3;
  options.worker.max_sessions = 1;
  auto server = StartServer(options);
  ASSERT_NE(server, nullptr);
  // A client that opens a session and then sends nothing (no heartbeats: a stopped trainer).
  auto channel = grpc::CreateChannel(server->address(), grpc::InsecureChannelCredentials());
  auto stub = proto::Worker::NewStub(channel);
  grpc::ClientContext ctx;
  auto raw = stub->Process(&ctx);
  proto::ClientMessage open;
  open.mutable_open()->set_spec_json(pipeline::ToCanonicalJson(spec_));
  open.mutable_open()->set_cut(2);
  open.mutable_open()->set_client_version(SluiceVersion());
  ASSERT_TRUE(raw->Write(open));
  proto::WorkerMessage reply;
  ASSERT_TRUE(raw->Read(&reply));
  ASSERT_TRUE(reply.has_opened());
  EXPECT_DOUBLE_EQ(reply.opened().session_lease_s(), 0.3);
  // The worker ends it with the reason (metrics may come first).
  bool got_error = false;
  while (raw->Read(&reply)) {
    if (reply.has_error()) {
      got_error = true;
      EXPECT_EQ(reply.error().code(), static_cast<int>(absl::StatusCode::kDeadlineExceeded));
      EXPECT_THAT(reply.error().message(), HasSubstr("session lease expired"));
      break;
    }
  }
  EXPECT_TRUE(got_error);
  EXPECT_EQ(server->service().open_sessions(), 0);
  EXPECT_EQ(server->service().expired_sessions(), 1);
  ctx.TryCancel();
  // Its slot serves the next trainer.
  auto next = RemoteStream::Open(Connect(*server), Session(2));
  EXPECT_TRUE(next.ok()) << next.status();
}

TEST_F(GrpcWorkerTest, AnIdleTrainerHeartbeatsAndKeepsItsSession) {
  ServerOptions options;
  options.worker.session_lease_s = 3;  // heartbeats every second
  auto server = StartServer(options);
  ASSERT_NE(server, nullptr);
  auto stream = RemoteStream::Open(Connect(*server), Session(2));
  ASSERT_TRUE(stream.ok()) << stream.status();
  EXPECT_DOUBLE_EQ((*stream)->session_lease_s(), 3);
  std::vector<std::shared_ptr<WorkerSession>> sessions = server->service().Sessions();
  ASSERT_EQ(sessions.size(), 1u);
  // Sending nothing else, the trainer's heartbeats reach the worker.
  // (The sender counts a heartbeat once its write returns, which can be after the worker
  // has read it: wait for both.)
  ASSERT_TRUE(WaitUntil(
      [&] { return sessions[0]->heartbeats() >= 2 && (*stream)->heartbeats_sent() >= 2; }));
  EXPECT_FALSE(sessions[0]->expired());
  EXPECT_EQ(server->service().open_sessions(), 1);
  // And the session still works.
  Collected c = Collect(**stream, SendEpoch(**stream, ReadMode::kRemoteRead));
  EXPECT_TRUE(c.failure.ok()) << c.failure;
  EXPECT_EQ(c.elements.size(), 16u);
}

TEST_F(GrpcWorkerTest, ReportsAnUnreachableWorker) {
  std::string address;
  {
    auto server = StartServer(ServerOptions{});
    ASSERT_NE(server, nullptr);
    address = server->address();
  }
  ConnectOptions connect;
  connect.address = address;
  connect.connect_timeout_s = 1;
  auto stream = RemoteStream::Open(connect, Session(2));
  ASSERT_FALSE(stream.ok());
  EXPECT_EQ(stream.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(stream.status().message()),
              HasSubstr(absl::StrCat("worker ", address, " unreachable: ")));
}

TEST_F(GrpcWorkerTest, ReportsUnknownOpsVersionMismatchAndCapacity) {
  ServerOptions options;
  options.worker.max_sessions = 1;
  auto server = StartServer(options);
  ASSERT_NE(server, nullptr);
  SessionConfig bad = Session(2);
  bad.spec.ops.insert(bad.spec.ops.begin() + 1, pipeline::OpSpec{"warp_drive", {}});
  auto unknown = RemoteStream::Open(Connect(*server), bad);
  ASSERT_FALSE(unknown.ok());
  EXPECT_THAT(std::string(unknown.status().message()), HasSubstr("warp_drive"));
  EXPECT_THAT(std::string(unknown.status().message()), HasSubstr(server->address()));

  auto first = RemoteStream::Open(Connect(*server), Session(2));
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = RemoteStream::Open(Connect(*server), Session(2));
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(second.status().message()), HasSubstr("worker at capacity: 1 sessions"));

  ServerOptions old;
  old.worker.version = "0.0.1";
  auto old_server = StartServer(old);
  ASSERT_NE(old_server, nullptr);
  auto mismatch = RemoteStream::Open(Connect(*old_server), Session(2));
  ASSERT_FALSE(mismatch.ok());
  EXPECT_THAT(std::string(mismatch.status().message()), HasSubstr("0.0.1"));
  EXPECT_THAT(std::string(mismatch.status().message()), HasSubstr(SluiceVersion()));
}

TEST_F(GrpcWorkerTest, RefusesOversizedMessages) {
  ServerOptions options;
  options.worker.max_message_bytes = 64 << 10;
  auto server = StartServer(options);
  ASSERT_NE(server, nullptr);
  auto stream = RemoteStream::Open(Connect(*server), Session(1, ReadMode::kLocalRead));
  ASSERT_TRUE(stream.ok()) << stream.status();
  Split split;
  split.split_id = 3;
  Element e = test::RunLocally(spec_, test::SourceElements(spec_, 0), 0, 1)[0];
  e.tensors[2] = Tensor::Zeros(DType::kBytes, {100000});
  split.elements = {e};
  Status s = (*stream)->SendSplit(split);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(s.message()), HasSubstr("over worker"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("message limit of 65536"));
  EXPECT_EQ(KindOf(s), ErrorKind::kMessageLimit);

  // A client that ignores the limit is cut off by the server.
  auto channel = grpc::CreateChannel(server->address(), grpc::InsecureChannelCredentials());
  auto stub = proto::Worker::NewStub(channel);
  grpc::ClientContext ctx;
  auto raw = stub->Process(&ctx);
  proto::ClientMessage open;
  open.mutable_open()->set_spec_json(pipeline::ToCanonicalJson(spec_));
  open.mutable_open()->set_cut(2);
  open.mutable_open()->set_client_version(SluiceVersion());
  ASSERT_TRUE(raw->Write(open));
  proto::WorkerMessage reply;
  ASSERT_TRUE(raw->Read(&reply));
  proto::ClientMessage big;
  big.mutable_split()->set_payload(std::string(200000, 'x'));
  raw->Write(big);
  while (raw->Read(&reply)) {
  }
  grpc::Status status = raw->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << status.error_message();
}

TEST_F(GrpcWorkerTest, AStalledClientDoesNotGrowTheWorkersBuffer) {
  ServerOptions options;
  options.worker.threads = 2;
  auto server = StartServer(options);
  ASSERT_NE(server, nullptr);
  SessionConfig session = Session(1, ReadMode::kLocalRead);
  const size_t window = 64 << 10;
  session.max_inflight_bytes = window;
  auto stream = RemoteStream::Open(Connect(*server), session);
  ASSERT_TRUE(stream.ok()) << stream.status();
  Split split;
  const Element model = test::RunLocally(spec_, test::SourceElements(spec_, 0), 0, 1)[0];
  for (int i = 0; i < 100; ++i) {
    Element e = model;
    e.id.index = i;
    e.tensors[2] = Tensor::Zeros(DType::kBytes, {8192});
    split.elements.push_back(std::move(e));
  }
  ASSERT_TRUE((*stream)->SendSplit(split).ok());
  // Never call Next(): wait until the worker stops producing.
  auto sessions = server->service().Sessions();
  for (int i = 0; i < 200 && sessions.empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    sessions = server->service().Sessions();
  }
  ASSERT_EQ(sessions.size(), 1u);
  size_t last = 0;
  for (int stable = 0, i = 0; stable < 5 && i < 300; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const size_t now = sessions[0]->buffered_bytes();
    stable = now == last && now > 0 ? stable + 1 : 0;
    last = now;
  }
  EXPECT_LE(sessions[0]->peak_buffered_bytes(), window);
  // Reading resumes the flow and everything arrives.
  Collected c = Collect(**stream, 1);
  ASSERT_TRUE(c.failure.ok()) << c.failure;
  EXPECT_EQ(c.elements.size(), 100u);
  EXPECT_LE(sessions[0]->peak_buffered_bytes(), window);
}

TEST_F(GrpcWorkerTest, CancelEndsABlockedNextAndShutdownEndsStreams) {
  auto server = StartServer(ServerOptions{});
  ASSERT_NE(server, nullptr);
  auto stream = RemoteStream::Open(Connect(*server), Session(2));
  ASSERT_TRUE(stream.ok());
  std::thread canceller([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    (*stream)->Cancel();
  });
  StreamEvent e;
  do {
    e = (*stream)->Next();
  } while (e.kind == StreamEvent::Kind::kMetrics);
  canceller.join();
  EXPECT_EQ(e.kind, StreamEvent::Kind::kFailed);
  EXPECT_EQ(e.status.code(), absl::StatusCode::kCancelled);
  EXPECT_FALSE((*stream)->SendSplit(Split{}).ok());

  auto other = RemoteStream::Open(Connect(*server), Session(2));
  ASSERT_TRUE(other.ok());
  server->Shutdown(1);
  do {
    e = (*other)->Next();
  } while (e.kind == StreamEvent::Kind::kMetrics);
  EXPECT_EQ(e.kind, StreamEvent::Kind::kFailed);
  EXPECT_THAT(std::string(e.status.message()), HasSubstr(server->address()));
}

TEST_F(GrpcWorkerTest, ADrainingWorkerTellsTheTrainerReturnsNewSplitsAndEndsTheStream) {
  auto server = StartServer(ServerOptions{});
  ASSERT_NE(server, nullptr);
  SessionConfig session = Session(/*cut=*/3);
  session.max_inflight_bytes = 1;  // one sample per credit: the split waits for the reader
  auto stream = RemoteStream::Open(Connect(*server), session);
  ASSERT_TRUE(stream.ok()) << stream.status();
  const std::vector<Element> source = test::SourceElements(spec_, 0);
  Split held;
  held.split_id = 0;
  held.elements.assign(source.begin(), source.begin() + 8);
  ASSERT_TRUE((*stream)->SendSplit(std::move(held)).ok());
  // The worker holds the split once its first sample is done.
  std::vector<std::shared_ptr<WorkerSession>> sessions;
  ASSERT_TRUE(WaitUntil([&] {
    sessions = server->service().Sessions();
    return sessions.size() == 1 && sessions[0]->buffered_bytes() > 0;
  }));
  EXPECT_EQ(server->service().BeginDrain(/*deadline_s=*/30), 1);
  Split late;
  late.split_id = 1;
  late.elements.assign(source.begin() + 8, source.end());
  ASSERT_TRUE((*stream)->SendSplit(std::move(late)).ok());
  ASSERT_TRUE(WaitUntil([&] { return sessions[0]->returned_splits() == 1; }));
  // A new trainer is turned away.
  auto refused = RemoteStream::Open(Connect(*server), Session(3));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("draining"));

  // Reading on, the trainer gets the notice, the whole held split and the late one back,
  // then the stream ends: drained.
  std::vector<Element> got;
  std::vector<StreamEvent> notices;
  std::vector<uint64_t> returned;
  std::vector<uint64_t> done;
  StreamEvent last;
  for (;;) {
    std::optional<StreamEvent> e = (*stream)->NextFor(30000);
    ASSERT_TRUE(e.has_value()) << "nothing from the worker for 30 s";
    if (e->kind == StreamEvent::Kind::kFailed) {
      last = std::move(*e);
      break;
    }
    switch (e->kind) {
      case StreamEvent::Kind::kElements:
        for (Element& el : e->elements) got.push_back(std::move(el));
        break;
      case StreamEvent::Kind::kDraining:
        notices.push_back(std::move(*e));
        break;
      case StreamEvent::Kind::kSplitReturned:
        returned.push_back(e->split_id);
        break;
      case StreamEvent::Kind::kSplitDone:
        done.push_back(e->split_id);
        break;
      default:
        break;
    }
  }
  ASSERT_EQ(notices.size(), 1u);
  EXPECT_EQ(notices[0].deadline_s, 30);
  EXPECT_EQ(notices[0].held_splits, 1);
  EXPECT_EQ(returned, std::vector<uint64_t>{1});
  EXPECT_EQ(done, std::vector<uint64_t>{0});
  test::ExpectSameById(
      test::RunLocally(spec_, std::vector<Element>(source.begin(), source.begin() + 8), 0, 3), got);
  EXPECT_EQ(last.status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(last.status.message()), HasSubstr("drained"));
  EXPECT_TRUE(WaitUntil([&] { return server->service().open_sessions() == 0; }));
}

TEST(TokenTest, ConstantTimeEqualsAndTokenFiles) {
  EXPECT_TRUE(ConstantTimeEquals("abc", "abc"));
  EXPECT_FALSE(ConstantTimeEquals("abc", "abd"));
  EXPECT_FALSE(ConstantTimeEquals("abc", "abcd"));
  TempDir dir;
  EXPECT_EQ(*ReadTokenFile(dir.Write("t", "  tok3n \nignored\n")), "tok3n");
  EXPECT_EQ(ReadTokenFile(dir.Write("e", "\n")).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadTokenFile(dir.path() + "/missing").status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace sluice::rpc
