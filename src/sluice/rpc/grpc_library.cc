#include "sluice/rpc/grpc_library.h"

#include <grpc/grpc.h>

namespace sluice::rpc {

void KeepGrpcInitialized() {
  // Never released (grpc_library.h): a function-local static runs grpc_init() exactly once.
  [[maybe_unused]] static const bool initialized = [] {
    grpc_init();
    return true;
  }();
}

}  // namespace sluice::rpc
