#include "sluice/rpc/connector.h"

namespace sluice::rpc {
namespace {

class Grpc final : public Connector {
 public:
  StatusOr<std::unique_ptr<RemoteStream>> Open(const ConnectOptions& connect,
                                               const SessionConfig& session) override {
    return RemoteStream::Open(connect, session);
  }
  StatusOr<LinkProbe> Probe(const ConnectOptions& connect, double target_s, double max_s,
                            const std::string& check_path, std::mutex* one_at_a_time) override {
    return ProbeWorker(connect, target_s, max_s, check_path, one_at_a_time);
  }
};

}  // namespace

const std::shared_ptr<Connector>& GrpcConnector() {
  static const std::shared_ptr<Connector>* const grpc =
      new std::shared_ptr<Connector>(std::make_shared<Grpc>());
  return *grpc;
}

}  // namespace sluice::rpc
