#include "sluice/rpc/worker_metrics.h"

#include <atomic>
#include <memory>

namespace sluice::rpc {
namespace {

double Read(const std::atomic<int64_t>& n) {
  return static_cast<double>(n.load(std::memory_order_relaxed));
}

}  // namespace

std::vector<metrics::Family> OpFamilies(const std::string& prefix, const std::string& where,
                                        const std::vector<pipeline::OpStatsSnapshot>& ops) {
  using metrics::Family;
  Family samples = Family::Counter(prefix + "_op_samples_total",
                                   "Samples each op produced " + where + ".");
  Family cpu = Family::Counter(prefix + "_op_cpu_seconds_total",
                               "Thread CPU time spent inside each op " + where + ".");
  Family bytes = Family::Counter(prefix + "_op_output_bytes_total",
                                 "Payload bytes each op produced " + where + ".");
  Family errors = Family::Counter(prefix + "_op_errors_total",
                                  "Samples each op failed on (data errors) " + where + ".");
  for (const pipeline::OpStatsSnapshot& op : ops) {
    const metrics::Labels labels = {{"op", op.name}};
    samples.Add(static_cast<double>(op.samples), labels);
    cpu.Add(static_cast<double>(op.cpu_ns) / 1e9, labels);
    bytes.Add(static_cast<double>(op.bytes_out), labels);
    errors.Add(static_cast<double>(op.errors), labels);
  }
  return {std::move(samples), std::move(cpu), std::move(bytes), std::move(errors)};
}

std::vector<metrics::Family> WorkerMetricFamilies(const WorkerService& service,
                                                  const std::string& not_ready) {
  using metrics::Family;
  std::vector<Family> out;
  const WorkerInfo info = service.Info();
  out.push_back(Family::Gauge("sluice_worker_info", "The worker's version (always 1).")
                    .Add(1, {{"version", info.version}}));
  out.push_back(Family::Gauge("sluice_worker_ready",
                              "1 while the health service says SERVING, 0 otherwise.")
                    .Add(not_ready.empty() ? 1 : 0));
  out.push_back(Family::Gauge("sluice_worker_threads", "Threads the worker's pool runs.")
                    .Add(info.threads));
  out.push_back(Family::Gauge("sluice_worker_cpu_budget", "CPUs the worker may use.")
                    .Add(info.cpu_budget));

  for (Family& f : OpFamilies("sluice_worker", "on this worker", service.OpTotals())) {
    out.push_back(std::move(f));
  }

  const WorkerCounters& c = service.counters();
  out.push_back(Family::Counter("sluice_worker_samples_sent_total",
                                "Samples sent to trainers (a batch counts its samples).")
                    .Add(Read(c.samples_sent)));
  Family sent = Family::Counter("sluice_worker_sent_bytes_total",
                                "Bytes of the chunks sent to trainers, by codec.");
  for (const Codec codec : {Codec::kNone, Codec::kLz4, Codec::kZstd}) {
    sent.Add(Read(c.bytes_sent[static_cast<int>(codec)]), {{"codec", CodecName(codec)}});
  }
  out.push_back(std::move(sent));
  out.push_back(Family::Counter("sluice_worker_received_bytes_total",
                                "Payload bytes of the splits trainers sent (read=local input).")
                    .Add(Read(c.bytes_received)));
  out.push_back(Family::Counter("sluice_worker_splits_received_total",
                                "Splits trainers handed to this worker.")
                    .Add(Read(c.splits_received)));
  out.push_back(Family::Counter("sluice_worker_sessions_opened_total",
                                "Trainer sessions opened.")
                    .Add(Read(c.sessions_opened)));
  out.push_back(Family::Counter("sluice_worker_errors_total",
                                "Errors by kind: opens refused (capacity, spec, version, "
                                "unavailable, unauthenticated), sessions failed or expired.")
                    .Add(Read(c.refused_capacity), {{"kind", "refused_capacity"}})
                    .Add(Read(c.refused_spec), {{"kind", "refused_spec"}})
                    .Add(Read(c.refused_version), {{"kind", "refused_version"}})
                    .Add(Read(c.refused_unavailable), {{"kind", "refused_unavailable"}})
                    .Add(Read(c.refused_unauthenticated), {{"kind", "unauthenticated"}})
                    .Add(Read(c.sessions_failed), {{"kind", "session_failed"}})
                    .Add(static_cast<double>(service.expired_sessions()),
                         {{"kind", "session_expired"}}));

  WorkerSession::Depths total;
  const std::vector<std::shared_ptr<WorkerSession>> sessions = service.Sessions();
  for (const auto& session : sessions) {
    const WorkerSession::Depths d = session->depths();
    total.open_splits += d.open_splits;
    total.queued_inputs += d.queued_inputs;
    total.queued_outputs += d.queued_outputs;
    total.buffered_bytes += d.buffered_bytes;
  }
  out.push_back(Family::Gauge("sluice_worker_sessions", "Trainer sessions open now.")
                    .Add(static_cast<double>(sessions.size())));
  out.push_back(Family::Gauge("sluice_worker_splits_in_flight",
                              "Splits held now (received, not yet all delivered).")
                    .Add(static_cast<double>(total.open_splits)));
  out.push_back(Family::Gauge("sluice_worker_queue_depth",
                              "Items queued now: input samples waiting for a thread, output "
                              "chunks waiting for the connection.")
                    .Add(static_cast<double>(total.queued_inputs), {{"queue", "input"}})
                    .Add(static_cast<double>(total.queued_outputs), {{"queue", "output"}}));
  out.push_back(Family::Gauge("sluice_worker_buffered_bytes",
                              "Bytes the sessions hold now (queued input and unsent output).")
                    .Add(static_cast<double>(total.buffered_bytes)));
  return out;
}

}  // namespace sluice::rpc
