// The gRPC library's lifetime in a Sluice process.
//
// gRPC counts its users (channels, servers) and shuts itself down when the last one goes; the
// next channel starts it again. In the packaged gRPC (1.51) that shutdown joins an executor
// thread which can sit out its 10 s poll timeout before it notices (seen on a 6.18 kernel in
// about one shutdown of three), so a process that closes its last channel and opens another
// (a trainer between probes and streams, a Python loader closed and made again, a test after
// each server) could stall for 10 s. KeepGrpcInitialized() takes one reference for the life of
// the process, the first time anything here uses gRPC: the library then starts once and is
// torn down with the process.
//
// Thread-safe; cheap after the first call.
#ifndef SLUICE_RPC_GRPC_LIBRARY_H_
#define SLUICE_RPC_GRPC_LIBRARY_H_

namespace sluice::rpc {

void KeepGrpcInitialized();

}  // namespace sluice::rpc

#endif  // SLUICE_RPC_GRPC_LIBRARY_H_
