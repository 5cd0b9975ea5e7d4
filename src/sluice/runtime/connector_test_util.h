// A connector for the runtime's tests (rpc/connector.h): the real gRPC connector with
// faults where a test puts them, so the Loader's and the AutoLoader's failure and re-plan
// orderings are tested against a real worker without killing processes or waiting on luck.
#ifndef SLUICE_RUNTIME_CONNECTOR_TEST_UTIL_H_
#define SLUICE_RUNTIME_CONNECTOR_TEST_UTIL_H_

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "sluice/core/status.h"
#include "sluice/rpc/connector.h"

namespace sluice::runtime::test {

// What the FaultyConnector does to one session, chosen when it is opened.
struct Fault {
  Status refuse;         // not OK: the open fails with this
  int break_after = -1;  // >= 0: the stream fails right after this many elements events
  int quiet_after = -1;  // >= 0: after this many elements events it delivers nothing more
};
inline Fault BreakAfter(int chunks) {
  Fault f;
  f.break_after = chunks;
  return f;
}
inline Fault QuietAfter(int chunks) {
  Fault f;
  f.quiet_after = chunks;
  return f;
}
inline Fault Refuse(Status why) {
  Fault f;
  f.refuse = std::move(why);
  return f;
}

// The real gRPC connector with faults where a test puts them: each open asks `plan` (by the
// open's number, from 0) what to do to that session. The stream it returns wraps the real
// one, so the worker, the wire and the samples are real; only the moment of the fault is the
// test's. Counts the opens, the streams opened and the chunks that streams after the first
// delivered: what tests wait on instead of on time.
class FaultyConnector final : public rpc::Connector {
 public:
  // `probe_plan` (optional): the status each probe (by number, from 0) fails with; OK: the
  // real probe runs.
  explicit FaultyConnector(std::function<Fault(int open)> plan,
                           std::function<Status(int probe)> probe_plan = nullptr)
      : plan_(std::move(plan)), probe_plan_(std::move(probe_plan)) {}

  StatusOr<std::unique_ptr<rpc::RemoteStream>> Open(const rpc::ConnectOptions& connect,
                                                    const rpc::SessionConfig& session) override {
    int open = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      open = opens_++;
      cv_.notify_all();
    }
    const Fault fault = plan_(open);
    if (!fault.refuse.ok()) return fault.refuse;
    SLUICE_ASSIGN_OR_RETURN(std::unique_ptr<rpc::RemoteStream> real,
                            rpc::GrpcConnector()->Open(connect, session));
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++streams_;
      cv_.notify_all();
    }
    return std::unique_ptr<rpc::RemoteStream>(new Stream(this, std::move(real), fault));
  }
  StatusOr<rpc::LinkProbe> Probe(const rpc::ConnectOptions& connect, double target_s, double max_s,
                                 const std::string& check_path,
                                 std::mutex* one_at_a_time) override {
    int probe = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      probe = probes_++;
    }
    if (probe_plan_ != nullptr) {
      if (Status refused = probe_plan_(probe); !refused.ok()) return refused;
    }
    return rpc::GrpcConnector()->Probe(connect, target_s, max_s, check_path, one_at_a_time);
  }

  // Waits (bounded) until `done` holds of (opens, streams opened, elements events delivered
  // by streams after the first).
  bool WaitUntil(const std::function<bool(int, int, int)>& done, double seconds = 120) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::duration<double>(seconds),
                        [&] { return done(opens_, streams_, later_chunks_); });
  }
  int opens() {
    std::lock_guard<std::mutex> lock(mu_);
    return opens_;
  }

 private:
  class Stream final : public rpc::RemoteStream {
   public:
    Stream(FaultyConnector* owner, std::unique_ptr<rpc::RemoteStream> real, Fault fault)
        : owner_(owner), real_(std::move(real)), fault_(fault), first_(owner->streams() == 1) {}
    const rpc::WorkerInfo& info() const override { return real_->info(); }
    Status SendSplit(rpc::Split split) override { return real_->SendSplit(std::move(split)); }
    std::optional<rpc::StreamEvent> NextFor(int64_t timeout_ms) override {
      if (fault_.break_after >= 0 && chunks_ >= fault_.break_after) {
        rpc::StreamEvent failed;
        failed.kind = rpc::StreamEvent::Kind::kFailed;
        failed.status = absl::UnavailableError(
            absl::StrCat("worker ", real_->info().address, ": connection broken by the test"));
        real_->Cancel();
        return failed;
      }
      if (fault_.quiet_after >= 0 && chunks_ >= fault_.quiet_after) {
        // Silent: what the worker sends is not read, as behind a black-holed link.
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms < 0 ? 3600000 : timeout_ms),
                     [&] { return cancelled_; });
        if (!cancelled_) return std::nullopt;
        rpc::StreamEvent failed;
        failed.kind = rpc::StreamEvent::Kind::kFailed;
        failed.status = absl::CancelledError("cancelled");
        return failed;
      }
      std::optional<rpc::StreamEvent> event = real_->NextFor(timeout_ms);
      if (event.has_value() && event->kind == rpc::StreamEvent::Kind::kElements) {
        ++chunks_;
        if (!first_) owner_->CountLaterChunk();
      }
      return event;
    }
    void Cancel() override {
      {
        std::lock_guard<std::mutex> lock(mu_);
        cancelled_ = true;
        cv_.notify_all();
      }
      real_->Cancel();
    }
    int64_t bytes_received() const override { return real_->bytes_received(); }
    int64_t read_cpu_ns() const override { return real_->read_cpu_ns(); }
    int64_t decode_cpu_ns() const override { return real_->decode_cpu_ns(); }
    double session_lease_s() const override { return real_->session_lease_s(); }
    int64_t heartbeats_sent() const override { return real_->heartbeats_sent(); }

   private:
    FaultyConnector* const owner_;
    const std::unique_ptr<rpc::RemoteStream> real_;
    const Fault fault_;
    const bool first_;
    int chunks_ = 0;  // the reader's thread only
    std::mutex mu_;
    std::condition_variable cv_;
    bool cancelled_ = false;
  };

  int streams() {
    std::lock_guard<std::mutex> lock(mu_);
    return streams_;
  }
  void CountLaterChunk() {
    std::lock_guard<std::mutex> lock(mu_);
    ++later_chunks_;
    cv_.notify_all();
  }

  const std::function<Fault(int)> plan_;
  const std::function<Status(int)> probe_plan_;
  std::mutex mu_;
  std::condition_variable cv_;
  int opens_ = 0;
  int probes_ = 0;
  int streams_ = 0;
  int later_chunks_ = 0;
};

}  // namespace sluice::runtime::test

#endif  // SLUICE_RUNTIME_CONNECTOR_TEST_UTIL_H_
