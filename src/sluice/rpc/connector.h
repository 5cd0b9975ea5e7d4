// Connector: how a trainer reaches its workers, the one seam between the runtime and the
// network (LevelDB's Env is the model). The runtime opens every session and runs every link
// probe through the Connector in its options (LoaderOptions::connector; the AutoLoader and
// the FastFlow runner use their base Loader options'), so a test can decide exactly when a
// stream is refused, breaks or goes quiet, and test the Loader's failure orderings without
// waiting on luck or killing processes (runtime/connector_test_util.h).
//
// GrpcConnector() is the real one: RemoteStream::Open and ProbeWorker over gRPC. A null
// connector in any options means it.
//
// Thread-safety: Open and Probe are called from several threads at once (one link
// supervisor per worker, one probe thread per worker); an implementation must allow that.
#ifndef SLUICE_RPC_CONNECTOR_H_
#define SLUICE_RPC_CONNECTOR_H_

#include <memory>
#include <mutex>
#include <string>

#include "sluice/core/status.h"
#include "sluice/rpc/remote_stream.h"

namespace sluice::rpc {

class Connector {
 public:
  virtual ~Connector() = default;
  // As RemoteStream::Open.
  virtual StatusOr<std::unique_ptr<RemoteStream>> Open(const ConnectOptions& connect,
                                                       const SessionConfig& session) = 0;
  // As ProbeWorker.
  virtual StatusOr<LinkProbe> Probe(const ConnectOptions& connect, double target_s, double max_s,
                                    const std::string& check_path, std::mutex* one_at_a_time) = 0;
};

// The gRPC connector (a process-wide instance; never null).
const std::shared_ptr<Connector>& GrpcConnector();

// `connector`, or GrpcConnector() when it is null.
inline Connector& ConnectorOr(const std::shared_ptr<Connector>& connector) {
  return connector != nullptr ? *connector : *GrpcConnector();
}

}  // namespace sluice::rpc

#endif  // SLUICE_RPC_CONNECTOR_H_
