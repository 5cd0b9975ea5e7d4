// The worker's gRPC health service (grpc.health.v1) through its life, over real gRPC.
#include <grpcpp/grpcpp.h>

#include <filesystem>
#include <string>

#include "gtest/gtest.h"
#include "sluice/rpc/grpc_worker_server.h"
#include "sluice/rpc/health.grpc.pb.h"
#include "sluice/rpc/rpc_test_util.h"

namespace sluice::rpc {
namespace {

namespace fs = std::filesystem;
using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

// Asks the health service about `service`.
grpc::Status Ask(const std::string& address, const std::string& service,
                 HealthCheckResponse* response) {
  auto stub = grpc::health::v1::Health::NewStub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  HealthCheckRequest request;
  request.set_service(service);
  return stub->Check(&ctx, request, response);
}

// The status the health service gives for `service`; UNKNOWN when the call fails.
HealthCheckResponse::ServingStatus Check(const std::string& address, const std::string& service) {
  HealthCheckResponse response;
  return Ask(address, service, &response).ok() ? response.status()
                                               : HealthCheckResponse::UNKNOWN;
}

TEST(WorkerHealthTest, StartingServingDataRootLostDrainingAndShuttingDown) {
  const test::TempDir dir;
  const fs::path root = fs::path(dir.path()) / "root";
  const fs::path moved = fs::path(dir.path()) / "moved";
  fs::create_directories(root);
  ServerOptions options;
  options.listen = "127.0.0.1:0";
  options.worker.data_root = root.string();
  auto started = GrpcWorkerServer::Start(options);
  ASSERT_TRUE(started.ok()) << started.status();
  GrpcWorkerServer& server = **started;
  const std::string address = server.address();

  // Starting: bound, but not yet serving.
  EXPECT_EQ(Check(address, ""), HealthCheckResponse::NOT_SERVING);
  EXPECT_EQ(Check(address, kHealthServiceName), HealthCheckResponse::NOT_SERVING);
  EXPECT_EQ(server.NotReadyReason(), "starting");

  server.MarkStarted();
  EXPECT_EQ(Check(address, ""), HealthCheckResponse::SERVING);
  EXPECT_EQ(Check(address, kHealthServiceName), HealthCheckResponse::SERVING);
  EXPECT_EQ(server.NotReadyReason(), "");

  // The data root goes away (an unmounted volume): not serving, and why.
  fs::rename(root, moved);
  EXPECT_NE(server.UpdateHealth().find("data root " + root.string()), std::string::npos);
  EXPECT_EQ(Check(address, kHealthServiceName), HealthCheckResponse::NOT_SERVING);
  fs::rename(moved, root);
  EXPECT_EQ(server.UpdateHealth(), "");
  EXPECT_EQ(Check(address, kHealthServiceName), HealthCheckResponse::SERVING);

  // Draining: NOT_SERVING at once (load balancers and probes stop sending new trainers).
  server.service().BeginDrain(/*deadline_s=*/30);
  EXPECT_EQ(server.NotReadyReason(), "draining");
  EXPECT_EQ(Check(address, ""), HealthCheckResponse::NOT_SERVING);
  EXPECT_EQ(Check(address, kHealthServiceName), HealthCheckResponse::NOT_SERVING);

  // Shutting down: never SERVING again (or no answer at all once the server is gone).
  server.Shutdown(/*grace_s=*/5);
  EXPECT_EQ(server.NotReadyReason(), "shutting down");
  EXPECT_NE(Check(address, kHealthServiceName), HealthCheckResponse::SERVING);
  EXPECT_EQ(server.UpdateHealth(), "shutting down");
  server.Wait();
}

TEST(WorkerHealthTest, AnUnknownServiceNameIsNotFound) {
  ServerOptions options;
  options.listen = "127.0.0.1:0";
  auto started = GrpcWorkerServer::Start(options);
  ASSERT_TRUE(started.ok()) << started.status();
  (*started)->MarkStarted();
  HealthCheckResponse response;
  EXPECT_EQ(Ask((*started)->address(), "no.such.Service", &response).error_code(),
            grpc::StatusCode::NOT_FOUND);
}

}  // namespace
}  // namespace sluice::rpc
