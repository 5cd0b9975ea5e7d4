// The metrics a `sluice worker` serves (docs/metrics.md lists them with their meaning): what
// its sessions ran per op, what it sent and received, what it holds now, and what it refused
// or lost, read from the WorkerService's counters at scrape time.
#ifndef SLUICE_RPC_WORKER_METRICS_H_
#define SLUICE_RPC_WORKER_METRICS_H_

#include <string>
#include <vector>

#include "sluice/metrics/exposition.h"
#include "sluice/rpc/worker_service.h"

namespace sluice::rpc {

// `not_ready` is the health service's reason (empty: serving), for sluice_worker_ready.
std::vector<metrics::Family> WorkerMetricFamilies(const WorkerService& service,
                                                  const std::string& not_ready);

}  // namespace sluice::rpc

#endif  // SLUICE_RPC_WORKER_METRICS_H_
