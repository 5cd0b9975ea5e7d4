// RemoteLink: one worker of a Loader. Internal to the runtime.
#ifndef SLUICE_RUNTIME_REMOTE_LINK_H_
#define SLUICE_RUNTIME_REMOTE_LINK_H_

#include <pthread.h>

#include "sluice/runtime/loader_impl.h"

namespace sluice::runtime {

// One worker: a supervisor thread keeps a RemoteStream open (reconnecting with backoff), a
// feeder thread sends it the splits the coordinator gives its consumer, and the supervisor
// reads its events into the merge.
class RemoteLink {
 public:
  RemoteLink(Loader::Impl* loader, int consumer, rpc::ConnectOptions connect, double share)
      : loader_(loader),
        consumer_(consumer),
        connect_(std::move(connect)),
        share_(share),
        watch_(loader->options.hang) {}

  void set_share(double share) {
    std::lock_guard<std::mutex> lock(mu_);
    share_ = share;
  }

  ~RemoteLink() { Stop(); }

  // The first connection attempt (in Create, before the coordinator exists).
  Status OpenFirst() {
    StatusOr<std::unique_ptr<rpc::RemoteStream>> opened =
        rpc::ConnectorOr(loader_->options.connector).Open(connect_, loader_->session);
    std::lock_guard<std::mutex> lock(mu_);
    if (!opened.ok()) {
      last_error_ = std::string(opened.status().message());
      return opened.status();
    }
    stream_ = std::shared_ptr<rpc::RemoteStream>(std::move(*opened));
    ++connects_;
    connected_ = true;
    return absl::OkStatus();
  }

  void Start() {
    supervisor_ = std::thread([this] { Supervise(); });
    pthread_setname_np(supervisor_.native_handle(), "sluice-link");
  }

  // Cancels the stream and wakes a backoff sleep; the supervisor then exits.
  void Cancel() {
    std::shared_ptr<rpc::RemoteStream> stream;
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
      stream = stream_;
      cv_.notify_all();
    }
    if (stream != nullptr) stream->Cancel();
  }

  void Stop() {
    Cancel();
    if (supervisor_.joinable()) supervisor_.join();
  }

  WorkerReport Report(int64_t samples) const {
    std::lock_guard<std::mutex> lock(mu_);
    WorkerReport r;
    r.address = connect_.address;
    r.share = share_;
    r.samples = samples;
    r.bytes_received = bytes_received_;
    r.read_cpu_ns = past_read_cpu_ns_ + (stream_ ? stream_->read_cpu_ns() : 0);
    r.decode_cpu_ns = past_decode_cpu_ns_ + (stream_ ? stream_->decode_cpu_ns() : 0);
    r.connected = connected_;
    r.connects = connects_;
    r.failures = failures_;
    r.drains = drains_;
    r.draining = draining_;
    r.bulk = stream_ != nullptr ? stream_->bulk() : last_bulk_;
    r.shared_memory = stream_ != nullptr ? stream_->bulk_shared_memory() : last_shared_memory_;
    r.shared_slots = past_shared_slots_ + (stream_ ? stream_->shared_slots_received() : 0);
    r.hangs = hangs_;
    r.last_hang_silence_s = last_hang_silence_s_;
    r.last_error = last_error_;
    r.metrics = metrics_;
    r.cpu_share = cpu_share_;
    r.cpu_ns = cpu_ns_;
    return r;
  }

 private:
  bool Stopping() const {
    std::lock_guard<std::mutex> lock(mu_);
    return stop_ || loader_->stopping.load();
  }

  // Sleeps `seconds` unless stopped first; returns false when stopped.
  bool Backoff(double seconds) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, std::chrono::duration<double>(seconds),
                 [&] { return stop_ || loader_->stopping.load(); });
    return !stop_ && !loader_->stopping.load();
  }

  void Supervise() {
    Coordinator* coordinator = loader_->coordinator.get();
    double backoff = loader_->options.reconnect_initial_s;
    std::string last_warning;
    {
      std::lock_guard<std::mutex> lock(mu_);
      // Unreachable at start: Create() already said so; wait before trying again.
      if (stream_ == nullptr) last_warning = last_error_;
    }
    if (!last_warning.empty()) {
      if (!Backoff(backoff)) return;
      backoff = std::min(backoff * 2, loader_->options.reconnect_max_s);
    }
    for (;;) {
      if (Stopping() || coordinator->done()) break;
      std::shared_ptr<rpc::RemoteStream> stream;
      {
        std::lock_guard<std::mutex> lock(mu_);
        stream = stream_;
      }
      if (stream == nullptr) {
        // Short attempts: the backoff loop is the retry, and Stop() waits for an attempt.
        rpc::ConnectOptions attempt = connect_;
        attempt.connect_timeout_s = std::min(attempt.connect_timeout_s, kReconnectTimeoutS);
        StatusOr<std::unique_ptr<rpc::RemoteStream>> opened =
            rpc::ConnectorOr(loader_->options.connector).Open(attempt, loader_->session);
        if (!opened.ok()) {
          const std::string message(opened.status().message());
          {
            std::lock_guard<std::mutex> lock(mu_);
            last_error_ = message;
          }
          if (message != last_warning) {
            loader_->Warn(absl::StrCat("cannot reach worker ", connect_.address,
                                       " (retrying in the background): ", message));
            last_warning = message;
          }
          if (!Backoff(backoff)) break;
          backoff = std::min(backoff * 2, loader_->options.reconnect_max_s);
          continue;
        }
        stream = std::shared_ptr<rpc::RemoteStream>(std::move(*opened));
        int64_t connects = 0;
        {
          std::lock_guard<std::mutex> lock(mu_);
          stream_ = stream;
          connects = ++connects_;
          connected_ = true;
          if (stop_) stream->Cancel();
        }
        if (connects > 1 || !last_warning.empty()) {
          loader_->Warn(absl::StrCat("worker ", connect_.address, " is back; using it again"));
        }
        last_warning.clear();
      }
      backoff = loader_->options.reconnect_initial_s;
      coordinator->SetActive(consumer_, true);

      std::thread feeder([this, stream] { Feed(*stream); });
      pthread_setname_np(feeder.native_handle(), "sluice-feed");
      const StreamEnd end = Read(*stream);
      const Status& failure = end.status;
      // Whether the run was over when the stream ended (a stream ends with the run). A
      // stream that broke before is a failure even if the others finish the run while this
      // thread cleans up, and is counted and reported as one.
      const bool ended_with_run = coordinator->done();
      const int64_t requeued = coordinator->ConsumerFailed(consumer_);
      stream->Cancel();
      feeder.join();
      {
        std::lock_guard<std::mutex> lock(mu_);
        past_read_cpu_ns_ += stream->read_cpu_ns();
        past_decode_cpu_ns_ += stream->decode_cpu_ns();
        last_bulk_ = stream->bulk();
        last_shared_memory_ = stream->bulk_shared_memory();
        past_shared_slots_ += stream->shared_slots_received();
        stream_.reset();
        connected_ = false;
        draining_ = false;
        // The worker left on purpose, whether or not the run still needs it: a drain, not a
        // failure.
        if (end.drained) ++drains_;
      }
      const int64_t drained_requeued = requeued + end.returned_samples;
      if (end.drained) {
        Notify(WorkerEvent::Kind::kDrained, drained_requeued, 0, std::string(failure.message()));
      }
      if (Stopping() || ended_with_run || !loader_->merge->failure().ok()) break;
      if (IsDataError(failure, loader_->spec.options.on_error)) {
        // A run that others finished meanwhile delivered every sample: nothing to fail.
        if (!coordinator->done()) loader_->merge->Fail(failure);
        break;
      }
      last_warning = std::string(failure.message());
      if (end.drained) {
        if (coordinator->done()) break;
        // What it did not deliver is re-queued like a failed worker's, and it is reconnected
        // alike (a worker restarted on the same address is used again).
        loader_->Warn(absl::StrCat("worker ", connect_.address, " drained (", drained_requeued,
                                   " samples it had not delivered re-queued; reconnecting in "
                                   "the background)"));
        if (!Backoff(backoff)) break;
        backoff = std::min(backoff * 2, loader_->options.reconnect_max_s);
        continue;
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        ++failures_;
        last_error_ = std::string(failure.message());
        if (end.hung.has_value()) {
          ++hangs_;
          last_hang_silence_s_ = end.hung->silence_s;
        }
      }
      if (end.hung.has_value()) {
        loader_->Warn(absl::StrCat(failure.message(), "; ", requeued,
                                   " samples re-queued; its stream is cancelled and it is "
                                   "reconnected when it answers again"));
        Notify(WorkerEvent::Kind::kHung, requeued, 0, std::string(failure.message()));
      } else {
        loader_->Warn(absl::StrCat("worker ", connect_.address, " failed (", requeued,
                                   " samples re-queued; reconnecting): ", failure.message()));
        Notify(WorkerEvent::Kind::kFailed, requeued, 0, std::string(failure.message()));
      }
      if (coordinator->done()) break;  // nothing left to reconnect for
      if (!Backoff(backoff)) break;
      backoff = std::min(backoff * 2, loader_->options.reconnect_max_s);
    }
    std::lock_guard<std::mutex> lock(mu_);
    connected_ = false;
  }

  void Feed(rpc::RemoteStream& stream) {
    Coordinator* coordinator = loader_->coordinator.get();
    const bool local_read = loader_->session.read_mode == ReadMode::kLocalRead;
    for (;;) {
      SplitAssignment split;
      const Coordinator::Acquired got = coordinator->Acquire(consumer_, &split);
      if (got != Coordinator::Acquired::kSplit) {
        // Done or cancelled: end the stream so that the reader returns. Inactive: the reader
        // failed and is cleaning up.
        if (got != Coordinator::Acquired::kInactive) stream.Cancel();
        return;
      }
      rpc::Split out;
      out.split_id = split.split_id;
      out.elements.reserve(split.samples.size());
      for (size_t i = 0; i < split.samples.size(); ++i) {
        const SampleId id = split.samples[i];
        Element e =
            pipeline::MakeSourceElement(*loader_->files, loader_->with_label, id, split.files[i]);
        if (local_read) {
          Status read = pipeline::ApplyStages(loader_->read_stage, e);
          if (!read.ok()) {
            if (loader_->spec.options.on_error == pipeline::OnError::kSkip) {
              loader_->stats->RecordSkip(std::string(read.message()));
              loader_->SkipSample(id);
              continue;
            }
            loader_->merge->Fail(read);
            stream.Cancel();
            return;
          }
        }
        out.elements.push_back(std::move(e));
      }
      if (out.elements.empty()) continue;
      // A dead stream fails the send; the reader sees the failure and re-queues the split.
      // A split too large for the worker can never be sent: that ends the run, named.
      if (Status sent = stream.SendSplit(std::move(out)); !sent.ok()) {
        if (IsMessageLimitError(sent)) loader_->merge->Fail(sent);
        return;
      }
    }
  }

  // How a stream ended (Read).
  struct StreamEnd {
    Status status;                    // why
    std::optional<HangVerdict> hung;  // set: the worker was hung and the stream cancelled
    bool drained = false;             // the worker said it drains before the end
    int64_t returned_samples = 0;     // re-queued from the splits the worker returned
  };

  void Notify(WorkerEvent::Kind kind, int64_t requeued, double deadline_s, std::string message) {
    if (!loader_->options.on_worker_event) return;
    WorkerEvent e;
    e.kind = kind;
    e.address = connect_.address;
    e.requeued_samples = requeued;
    e.deadline_s = deadline_s;
    e.message = std::move(message);
    loader_->options.on_worker_event(e);
  }

  // Reads events until the stream fails (or is cancelled, or the worker drained) or the
  // worker is found hung (the stream is then cancelled); returns how it ended.
  StreamEnd Read(rpc::RemoteStream& stream) {
    Merge* merge = loader_->merge.get();
    Coordinator* coordinator = loader_->coordinator.get();
    StreamEnd end;
    watch_.Restart(NowNanos());
    for (;;) {
      // Only when nothing is waiting to be read is the worker silent: events queued while
      // this thread was pushing into the merge are deliveries.
      std::optional<rpc::StreamEvent> next = stream.NextFor(0);
      while (!next.has_value()) {
        if (std::optional<HangVerdict> v =
                watch_.Check(coordinator->HeldSamples(consumer_), NowNanos())) {
          stream.Cancel();
          end.hung = v;
          end.status = absl::DeadlineExceededError(
              absl::StrCat("worker ", connect_.address, " hung: ", v->Describe(watch_.policy())));
          return end;
        }
        next = stream.NextFor(kLivenessCheckMs);
      }
      rpc::StreamEvent& event = *next;
      switch (event.kind) {
        case rpc::StreamEvent::Kind::kElements: {
          {
            std::lock_guard<std::mutex> lock(mu_);
            bytes_received_ += static_cast<int64_t>(event.wire_bytes);
          }
          int64_t samples = 0;
          for (const Element& e : event.elements) {
            samples += e.members.empty() ? 1 : static_cast<int64_t>(e.members.size());
          }
          watch_.Delivered(samples, NowNanos());
          // The chunk's elements at once: one wake-up of the merge's consumer, not one each.
          if (!merge->PushAll(consumer_, std::move(event.elements)).ok()) {
            stream.Cancel();
            end.status = absl::CancelledError("merge closed");
            return end;
          }
          break;
        }
        case rpc::StreamEvent::Kind::kSplitDone:
          watch_.Delivered(0, NowNanos());
          for (const rpc::SkippedSample& skipped : event.skipped) {
            // A short last batch dropped under drop_remainder is not a failed sample.
            if (skipped.kind != ErrorKind::kDropped) {
              loader_->stats->RecordSkip(
                  absl::StrCat("worker ", connect_.address, ": ", skipped.reason));
            }
            loader_->SkipSample(skipped.id);
          }
          coordinator->ReleaseSplit(event.split_id);
          break;
        case rpc::StreamEvent::Kind::kMetrics: {
          std::lock_guard<std::mutex> lock(mu_);
          metrics_ = std::move(event.metrics);
          if (event.cpu_share > 0) cpu_share_ = event.cpu_share;
          cpu_ns_ = event.cpu_ns;
          break;
        }
        case rpc::StreamEvent::Kind::kDraining:
          if (!end.drained) {
            end.drained = true;
            // No new splits: the feeder's Acquire returns kInactive and it stops, while the
            // splits the worker holds stay open until delivered or returned.
            coordinator->SetActive(consumer_, false);
            {
              std::lock_guard<std::mutex> lock(mu_);
              draining_ = true;
            }
            loader_->Warn(absl::StrFormat(
                "worker %s is draining (shutting down within %.1f s): it gets no new splits, "
                "and its share goes to the others",
                connect_.address, event.deadline_s));
            Notify(WorkerEvent::Kind::kDraining, 0, event.deadline_s, "");
          }
          break;
        case rpc::StreamEvent::Kind::kSplitReturned:
          watch_.Delivered(0, NowNanos());
          end.returned_samples += coordinator->ReleaseSplit(event.split_id);
          break;
        case rpc::StreamEvent::Kind::kFailed:
          end.status = event.status.ok() ? absl::UnavailableError("stream ended") : event.status;
          return end;
      }
    }
  }

  Loader::Impl* const loader_;
  const int consumer_;
  const rpc::ConnectOptions connect_;
  double share_ ABSL_GUARDED_BY(mu_);
  std::thread supervisor_;
  DeliveryWatch watch_;  // used by the supervisor thread only (Read)

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::shared_ptr<rpc::RemoteStream> stream_ ABSL_GUARDED_BY(mu_);
  // Receive-side CPU of the streams that ended (RemoteStream::read_cpu_ns/decode_cpu_ns).
  int64_t past_read_cpu_ns_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t past_decode_cpu_ns_ ABSL_GUARDED_BY(mu_) = 0;
  bool last_bulk_ ABSL_GUARDED_BY(mu_) = false;  // the last stream's RemoteStream::bulk()
  bool last_shared_memory_ ABSL_GUARDED_BY(mu_) = false;  // and bulk_shared_memory()
  int64_t past_shared_slots_ ABSL_GUARDED_BY(mu_) = 0;     // of the streams that ended
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool connected_ ABSL_GUARDED_BY(mu_) = false;
  int64_t connects_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t failures_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t drains_ ABSL_GUARDED_BY(mu_) = 0;
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  int64_t hangs_ ABSL_GUARDED_BY(mu_) = 0;
  double last_hang_silence_s_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t bytes_received_ ABSL_GUARDED_BY(mu_) = 0;
  std::string last_error_ ABSL_GUARDED_BY(mu_);
  std::vector<rpc::WorkerOpMetrics> metrics_ ABSL_GUARDED_BY(mu_);
  double cpu_share_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t cpu_ns_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace sluice::runtime

#endif  // SLUICE_RUNTIME_REMOTE_LINK_H_
