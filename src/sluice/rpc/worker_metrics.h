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

// Per-op counters as four families, `<prefix>_op_samples_total`, `_op_cpu_seconds_total`,
// `_op_output_bytes_total` and `_op_errors_total`, labelled by op; `where` ends each help
// text ("on this worker"). The worker's and the trainer's metrics both use it.
std::vector<metrics::Family> OpFamilies(const std::string& prefix, const std::string& where,
                                        const std::vector<pipeline::OpStatsSnapshot>& ops);

// `not_ready` is the health service's reason (empty: serving), for sluice_worker_ready.
std::vector<metrics::Family> WorkerMetricFamilies(const WorkerService& service,
                                                  const std::string& not_ready);

}  // namespace sluice::rpc

#endif  // SLUICE_RPC_WORKER_METRICS_H_
