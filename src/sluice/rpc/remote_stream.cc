#include "sluice/rpc/remote_stream.h"

#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/client_unary_call.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <limits>
#include <mutex>
#include <random>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "sluice/core/clock.h"
#include "sluice/core/copy.h"
#include "sluice/rpc/bulk_channel.h"
#include "sluice/rpc/credit.h"
#include "sluice/rpc/grpc_library.h"
#include "sluice/rpc/grpc_worker_server.h"
#include "sluice/rpc/incoming_message.h"
#include "sluice/rpc/tls_files.h"
#include "sluice/rpc/wire.h"
#include "sluice/rpc/worker.grpc.pb.h"
#include "sluice/rpc/worker_service.h"

namespace sluice::rpc {
namespace {

constexpr size_t kMessageOverhead = 4096;
// The longest the trainer waits for the worker's Opened: the worker answers after parsing the
// spec and building its ops (milliseconds); 10 s, the hang floor (runtime/liveness.h), cuts
// off a worker that stopped in between without cutting a slow but live one.
constexpr double kOpenAnswerS = 10;

std::chrono::system_clock::time_point DeadlineIn(double seconds) {
  return std::chrono::system_clock::now() +
         std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

bool LooksLikeTls(const std::string& message) {
  const std::string m = absl::AsciiStrToLower(message);
  return absl::StrContains(m, "ssl") || absl::StrContains(m, "handshake") ||
         absl::StrContains(m, "certificate") || absl::StrContains(m, "tls");
}

// How the trainer connects, for explaining failures: with TLS (a CA given) and with a
// client certificate of its own.
struct TlsUse {
  bool tls = false;
  bool client_cert = false;
};

TlsUse TlsOf(const ConnectOptions& connect) {
  return TlsUse{!connect.tls_ca_file.empty(), !connect.tls_cert_file.empty()};
}

// The peer closed the connection without a word (gRPC's "Socket closed", "Connection reset
// by peer", "Broken pipe", end of file).
bool LooksClosed(const std::string& message) {
  const std::string m = absl::AsciiStrToLower(message);
  return absl::StrContains(m, "socket closed") || absl::StrContains(m, "connection reset") ||
         absl::StrContains(m, "broken pipe") || absl::StrContains(m, "end of file") ||
         absl::StrContains(m, "eof");
}

// A gRPC failure as a Status that names the worker and the cause. `tls` says how the channel
// was set up: a worker that closes a TLS connection at once is explained (a server that
// requires client certificates closes the connection of a client without one right after
// the handshake, and gRPC only reports "Socket closed").
Status WorkerError(const std::string& address, const grpc::Status& s, TlsUse tls = {}) {
  const std::string& msg = s.error_message();
  switch (s.error_code()) {
    case grpc::StatusCode::UNAUTHENTICATED:
      return absl::UnauthenticatedError(
          absl::StrCat("worker ", address, " refused the credentials: ", msg));
    case grpc::StatusCode::UNAVAILABLE:
      if (tls.tls && LooksClosed(msg)) {
        if (!tls.client_cert) {
          return absl::UnavailableError(absl::StrCat(
              "worker ", address,
              " refused the TLS handshake: it closed the connection, as a worker that requires "
              "a client certificate (mutual TLS, its --tls-client-ca) does with a trainer that "
              "has none: give the trainer --tls-cert and --tls-key, a certificate signed by "
              "the worker's --tls-client-ca (gRPC: ",
              msg, ")"));
        }
        return absl::UnavailableError(absl::StrCat(
            "worker ", address,
            " refused the TLS handshake: it closed the connection, as a worker with "
            "--tls-client-ca does when it does not trust the client certificate: check that "
            "the trainer's --tls-cert is signed by the CA in the worker's --tls-client-ca "
            "(gRPC: ",
            msg, ")"));
      }
      if (LooksLikeTls(msg)) {
        return absl::UnavailableError(
            absl::StrCat("worker ", address, ": TLS handshake failed: ", msg));
      }
      return absl::UnavailableError(absl::StrCat("worker ", address, " unreachable: ", msg));
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return absl::DeadlineExceededError(
          absl::StrCat("worker ", address, " did not answer in time: ", msg));
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return absl::ResourceExhaustedError(absl::StrCat("worker ", address, ": ", msg));
    default:
      return Status(static_cast<absl::StatusCode>(s.error_code()),
                    absl::StrCat("worker ", address, ": ", msg));
  }
}

proto::Codec ToProto(Codec c) {
  switch (c) {
    case Codec::kLz4:
      return proto::LZ4;
    case Codec::kZstd:
      return proto::ZSTD;
    default:
      return proto::NONE;
  }
}

class GrpcRemoteStream final : public RemoteStream {
 public:
  GrpcRemoteStream(WorkerInfo info, std::shared_ptr<grpc::Channel> channel, size_t max_send,
                   TlsUse tls)
      : info_(std::move(info)), channel_(std::move(channel)), max_send_(max_send), tls_(tls) {}

  ~GrpcRemoteStream() override {
    Cancel();
    if (reader_.joinable()) reader_.join();
  }

  Status Start(const ConnectOptions& connect, const SessionConfig& session) {
    if (!connect.token.empty()) ctx_.AddMetadata("authorization", "Bearer " + connect.token);
    land_slots_ = session.land_slots;
    batches_ = session.cut == kCutAfterBatch;
    // Process with IncomingMessage as the read type (incoming_message.h); the bytes are the
    // generated stub's.
    stream_.reset(grpc::internal::ClientReaderWriterFactory<proto::ClientMessage, IncomingMessage>::
                      Create(channel_.get(),
                             grpc::internal::RpcMethod("/sluice.rpc.proto.Worker/Process",
                                                       grpc::internal::RpcMethod::BIDI_STREAMING),
                             &ctx_));
    proto::ClientMessage open_msg;
    proto::Open* open = open_msg.mutable_open();
    open->set_spec_json(pipeline::ToCanonicalJson(session.spec));
    open->set_cut(session.cut);
    open->set_read_mode(session.read_mode == ReadMode::kLocalRead ? proto::LOCAL_READ
                                                                  : proto::REMOTE_READ);
    open->set_compression(ToProto(session.compression));
    open->set_max_inflight_bytes(session.max_inflight_bytes);
    open->set_client_version(SluiceVersion());
    open->set_max_message_bytes(connect.max_message_bytes);
    open->set_weight(session.weight);
    open->set_client_id(ProcessClientId());
    // Payloads on the bulk channel: not encrypted, so never under TLS.
    open->set_bulk(connect.bulk && !tls_.tls);
    IncomingMessage incoming;
    // The stream has no deadline (it lasts the session), so the answer to Open is bounded
    // here: a worker that stops between GetInfo and Opened would otherwise hold this call
    // until the keepalive gives up (30 s), and with it whoever waits for the reconnect.
    std::mutex guard_mu;
    std::condition_variable guard_cv;
    bool answered = false;
    bool timed_out = false;
    std::thread guard([&] {
      std::unique_lock<std::mutex> lock(guard_mu);
      if (!guard_cv.wait_for(lock, std::chrono::duration<double>(kOpenAnswerS),
                             [&] { return answered; })) {
        timed_out = true;
        ctx_.TryCancel();
      }
    });
    const bool ok = stream_->Write(open_msg) && stream_->Read(&incoming);
    {
      std::lock_guard<std::mutex> lock(guard_mu);
      answered = true;
      guard_cv.notify_all();
    }
    guard.join();
    if (timed_out) {
      stream_->Finish();
      return absl::DeadlineExceededError(absl::StrCat("worker ", info_.address,
                                                      " did not answer the session's Open within ",
                                                      kOpenAnswerS, " s"));
    }
    if (!ok) return WorkerError(info_.address, stream_->Finish(), tls_);
    const proto::WorkerMessage& reply = incoming.message;
    if (reply.has_error()) {
      ctx_.TryCancel();
      Status s(static_cast<absl::StatusCode>(reply.error().code()),
               absl::StrCat("worker ", info_.address, ": ", reply.error().message()));
      stream_->Finish();
      return s;
    }
    if (incoming.is_chunk || !reply.has_opened()) {
      ctx_.TryCancel();
      stream_->Finish();
      return absl::InternalError(
          absl::StrCat("worker ", info_.address, " answered Open with an unexpected message"));
    }
    info_.threads = reply.opened().threads();
    info_.cpu_budget = reply.opened().cpu_budget();
    lease_s_ = std::max(0.0, reply.opened().session_lease_s());
    // A third of the lease: the lease survives two heartbeats each delayed by a third of it
    // (a descheduled trainer, TCP retransmissions) before the worker gives up on us.
    heartbeat_ns_ = static_cast<int64_t>(lease_s_ / 3 * 1e9);
    // The window in force: the worker's answer, else (an older worker) what was asked.
    const uint64_t window = reply.opened().max_inflight_bytes() > 0
                                ? reply.opened().max_inflight_bytes()
                                : session.max_inflight_bytes;
    credit_ = CreditBatcher(window);
    max_receive_ = connect.max_message_bytes;
    // The bulk channel, where offered. Not reaching it is no failure: the worker sends on the
    // stream until a connection with the key arrives, so without one every chunk comes
    // there as it did without the channel.
    // On the worker's machine (its local socket is reachable only from its network
    // namespace), a shared-memory ring first; else TCP to its port.
    if (reply.opened().bulk_port() > 0 && reply.opened().bulk_key().size() == kBulkKeyBytes) {
      if (connect.bulk_shared_memory && !reply.opened().bulk_local().empty()) {
        StatusOr<std::unique_ptr<BulkConnection>> local =
            ConnectBulkLocal(reply.opened().bulk_local(), reply.opened().bulk_key(),
                             kBulkRingBytes, connect.shared_slots ? NewSlotArena() : nullptr);
        if (local.ok()) bulk_ = *std::move(local);
      }
      std::optional<std::string> host = HostOfAddress(connect.address);
      if (bulk_ == nullptr && host.has_value()) {
        StatusOr<int> fd = ConnectBulk(*host, static_cast<int>(reply.opened().bulk_port()),
                                       reply.opened().bulk_key());
        if (fd.ok()) bulk_ = std::make_unique<BulkConnection>(*fd);
      }
      // Before any split: the worker then knows, at its first chunk, where payloads go.
      proto::ClientMessage state;
      state.mutable_bulk_state()->set_connected(bulk_ != nullptr);
      if (!stream_->Write(state)) {
        ctx_.TryCancel();
        return WorkerError(info_.address, stream_->Finish(), tls_);
      }
    }
    reader_ = std::thread([this] { ReadLoop(); });
    pthread_setname_np(reader_.native_handle(), "sluice-recv");
    return absl::OkStatus();
  }

  const WorkerInfo& info() const override { return info_; }

  Status SendSplit(Split split) override {
    auto encoded = EncodeElements(split.elements, Codec::kNone);
    if (!encoded.ok()) return encoded.status();
    if (max_send_ > 0 && encoded->wire_bytes() + kMessageOverhead > max_send_) {
      return WithKind(absl::ResourceExhaustedError(absl::StrCat(
                          "split ", split.split_id, " is ", encoded->wire_bytes(),
                          " bytes, over worker ", info_.address, "'s message limit of ",
                          max_send_, " bytes (--max-message-bytes)")),
                      ErrorKind::kMessageLimit);
    }
    proto::ClientMessage msg;
    proto::Split* s = msg.mutable_split();
    s->set_split_id(split.split_id);
    s->set_header(std::move(encoded->header));
    s->set_payload(std::move(encoded->payload));
    std::lock_guard<std::mutex> lock(mu_);
    if (failed_) {
      return absl::FailedPreconditionError(
          absl::StrCat("stream to worker ", info_.address, " is closed: ", failure_.message()));
    }
    outgoing_.push_back(std::move(msg));
    writer_cv_.notify_one();
    return absl::OkStatus();
  }

  std::optional<StreamEvent> NextFor(int64_t timeout_ms) override {
    std::unique_lock<std::mutex> lock(mu_);
    const auto ready = [&] { return !events_.empty() || failed_; };
    if (timeout_ms < 0) {
      events_cv_.wait(lock, ready);
    } else if (!events_cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), ready)) {
      return std::nullopt;
    }
    if (events_.empty()) {
      StreamEvent e;
      e.kind = StreamEvent::Kind::kFailed;
      e.status = failure_;
      return e;
    }
    StreamEvent e = std::move(events_.front());
    events_.pop_front();
    if (e.kind == StreamEvent::Kind::kElements && !failed_) {
      credit_.Add(e.wire_bytes, NowNanos());
      // The writer wakes for a credit worth a message; a smaller one waits for its timer.
      if (credit_.DueBySize()) writer_cv_.notify_one();
    }
    return e;
  }

  void Cancel() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!failed_) {
        SetFailedLocked(
            absl::CancelledError(absl::StrCat("stream to worker ", info_.address, " cancelled")),
            /*keep_events=*/false);
      }
    }
    ctx_.TryCancel();
    // A read blocked on the bulk channel returns (bulk_ is set before the reader starts
    // and closed only after it ended).
    if (bulk_ != nullptr) bulk_->Shutdown();
  }

  bool bulk() const override { return bulk_ != nullptr; }
  bool bulk_shared_memory() const override { return bulk_ != nullptr && bulk_->shared_memory(); }
  int64_t bulk_bytes_received() const override { return bulk_bytes_received_.load(); }
  int64_t shared_slots_received() const override {
    return bulk_ != nullptr && bulk_->slot_arena() != nullptr ? bulk_->slot_arena()->slots_claimed()
                                                              : 0;
  }
  int64_t bytes_received() const override { return bytes_received_.load(); }
  int64_t read_cpu_ns() const override { return read_cpu_ns_.load(); }
  int64_t decode_cpu_ns() const override { return decode_cpu_ns_.load(); }
  double session_lease_s() const override { return lease_s_; }
  int64_t heartbeats_sent() const override { return heartbeats_sent_.load(); }

 private:
  // `keep_events`: what was received before stays to be read (a draining worker's last
  // chunks); otherwise it is dropped and the caller re-queues it with the rest.
  void SetFailedLocked(Status s, bool keep_events) {
    failed_ = true;
    failure_ = std::move(s);
    if (!keep_events) events_.clear();
    events_cv_.notify_all();
    writer_cv_.notify_all();
  }

  // Shared slots for the largest field that lands in slots (SessionConfig::land_slots), one
  // batch a region; null where there is none, or its slot is not a multiple of the wire's
  // alignment (the arena's layout needs it), or the arena cannot be made (the ring then
  // carries every byte).
  std::shared_ptr<SlotArena> NewSlotArena() const {
    const int field = LargestSlotsField(land_slots_);
    if (field < 0) return nullptr;
    const BatchSlots* key = land_slots_.at(field).get();
    if (key->batch_size() < 1) return nullptr;
    SlotArenaLayout layout;
    layout.regions = kSlotArenaRegions;
    layout.slots = static_cast<uint32_t>(key->batch_size());
    layout.slot_bytes = key->buffer_bytes() / static_cast<size_t>(key->batch_size());
    StatusOr<std::shared_ptr<SlotArena>> arena = SlotArena::Create(layout);
    return arena.ok() ? *std::move(arena) : nullptr;
  }

  void Fail(Status s) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!failed_) SetFailedLocked(std::move(s), /*keep_events=*/draining_);
  }

  void Push(StreamEvent e) {
    std::lock_guard<std::mutex> lock(mu_);
    if (failed_) return;
    events_.push_back(std::move(e));
    events_cv_.notify_all();
  }

  void WriteLoop() {
    int64_t last_write = NowNanos();
    while (true) {
      proto::ClientMessage msg;
      {
        std::unique_lock<std::mutex> lock(mu_);
        const auto ready = [&] {
          return failed_ || reader_ended_ || credit_.Due(NowNanos()) || !outgoing_.empty();
        };
        // Wake for the heartbeat, and for a small credit once it is due by time.
        int64_t until = heartbeat_ns_ > 0 ? last_write + heartbeat_ns_ : -1;
        const int64_t credit_at = credit_.DueAtNs();
        if (credit_at >= 0 && (until < 0 || credit_at < until)) until = credit_at;
        if (until >= 0) {
          const int64_t wait = until - NowNanos();
          writer_cv_.wait_for(lock, std::chrono::nanoseconds(std::max<int64_t>(0, wait)), ready);
        } else {
          writer_cv_.wait(lock, ready);
        }
        if (failed_ || reader_ended_) return;
        // Credit owed goes first when due, and with a split about to be written anyway.
        if (credit_.Due(NowNanos()) || (credit_.pending() > 0 && !outgoing_.empty())) {
          msg.mutable_credit()->set_bytes(credit_.Take());
        } else if (!outgoing_.empty()) {
          msg = std::move(outgoing_.front());
          outgoing_.pop_front();
        } else if (heartbeat_ns_ > 0 && NowNanos() >= last_write + heartbeat_ns_) {
          msg.mutable_heartbeat();  // nothing else sent for a while: renew the lease
        } else {
          continue;
        }
      }
      if (!stream_->Write(msg)) return;  // the reader sees why
      last_write = NowNanos();
      if (msg.has_heartbeat()) heartbeats_sent_.fetch_add(1, std::memory_order_relaxed);
    }
  }

  // A chunk's payload of `n` bytes from the bulk channel, into a buffer of its own.
  Status ReadBulk(uint64_t n, std::shared_ptr<Buffer>* payload) {
    if (bulk_ == nullptr) {
      return absl::DataLossError(absl::StrCat("worker ", info_.address,
                                              " sent a chunk's payload on a bulk data channel "
                                              "this stream did not connect"));
    }
    if (max_receive_ > 0 && n > max_receive_) {
      return absl::DataLossError(absl::StrCat("worker ", info_.address, " announced a chunk of ", n,
                                              " bytes, over the ", max_receive_,
                                              "-byte message limit"));
    }
    *payload = Buffer::Allocate(n);
    // A batch is read only once whole, by the consumer; a chunk of samples by the suffix
    // at once (core/copy.h).
    if (Status s = bulk_->Recv((*payload)->data(), n, /*read_later=*/batches_); !s.ok()) {
      return absl::UnavailableError(absl::StrCat("worker ", info_.address, ": ", s.message()));
    }
    bulk_bytes_received_.fetch_add(static_cast<int64_t>(n), std::memory_order_relaxed);
    return absl::OkStatus();
  }

  // A chunk's payload of `n` bytes on the bulk channel, each tensor read straight into its
  // slot of the batch being assembled (SessionConfig::land_slots); nullopt (nothing read)
  // where it cannot land so: no slots, a compressed or unusual payload, or a header that
  // does not decode (ReadBulk and DecodeElements then take it, and say what is wrong).
  std::optional<StatusOr<std::vector<Element>>> Land(const std::string& header, uint64_t n) {
    if (land_slots_.empty() || bulk_ == nullptr || (max_receive_ > 0 && n > max_receive_)) {
      return std::nullopt;
    }
    StatusOr<WireLayout> layout = DecodeLayout(header);
    if (!layout.ok() || layout->raw_size != n || !LandsInPlace(*layout)) return std::nullopt;
    SlotArena* arena = bulk_->slot_arena().get();
    StatusOr<std::vector<Element>> got = ReceiveElements(
        *std::move(layout),
        [this](uint8_t* to, size_t size, bool slot) {
          // The payload's parts follow one another: the room goes back once, after the last.
          return bulk_->Recv(to, size, /*read_later=*/slot, /*more=*/true);
        },
        [this](int field, DType dtype, const Shape& shape) -> std::optional<Tensor> {
          auto it = land_slots_.find(field);
          if (it == land_slots_.end() || it->second->dtype() != dtype ||
              it->second->shape() != shape) {
            return std::nullopt;
          }
          return it->second->Take(dtype, shape);
        },
        // Without shared slots, a chunk that names one is refused by ReceiveElements.
        arena == nullptr ? std::function<StatusOr<Tensor>(const TensorLayout&)>()
                         : [arena](const TensorLayout& t) {
                             return arena->Claim(t.offset, t.dtype, t.shape);
                           });
    if (!got.ok()) {
      return StatusOr<std::vector<Element>>(absl::UnavailableError(
          absl::StrCat("worker ", info_.address, ": ", got.status().message())));
    }
    bulk_->EndPayload();
    bulk_bytes_received_.fetch_add(static_cast<int64_t>(n), std::memory_order_relaxed);
    return got;
  }

  void ReadLoop() {
    std::thread writer([this] { WriteLoop(); });
    pthread_setname_np(writer.native_handle(), "sluice-send");
    IncomingMessage incoming;
    const proto::WorkerMessage& msg = incoming.message;
    bool drained = false;
    int64_t cpu = ThreadCpuNanos();
    while (stream_->Read(&incoming)) {
      const int64_t read_end = ThreadCpuNanos();
      read_cpu_ns_.fetch_add(read_end - cpu, std::memory_order_relaxed);
      cpu = read_end;
      if (incoming.is_chunk) {
        std::optional<StatusOr<std::vector<Element>>> landed;
        if (incoming.bulk_bytes > 0) landed = Land(incoming.header, incoming.bulk_bytes);
        if (landed.has_value() && !landed->ok()) {
          Fail(landed->status());
          ctx_.TryCancel();
          break;
        }
        if (incoming.bulk_bytes > 0 && !landed.has_value()) {
          if (Status got = ReadBulk(incoming.bulk_bytes, &incoming.payload); !got.ok()) {
            Fail(std::move(got));
            ctx_.TryCancel();
            break;
          }
        }
        if (incoming.bulk_bytes > 0) {  // landed or read whole: the channel's read
          const int64_t bulk_end = ThreadCpuNanos();
          read_cpu_ns_.fetch_add(bulk_end - cpu, std::memory_order_relaxed);
          cpu = bulk_end;
        }
        StreamEvent e;
        e.kind = StreamEvent::Kind::kElements;
        e.split_id = incoming.split_id;
        e.wire_bytes = incoming.header.size() +
                       (landed.has_value() ? incoming.bulk_bytes : incoming.payload->size());
        bytes_received_.fetch_add(static_cast<int64_t>(e.wire_bytes));
        auto decoded = landed.has_value()
                           ? *std::move(landed)
                           : DecodeElements(incoming.header, std::move(incoming.payload));
        if (!decoded.ok()) {
          Fail(absl::DataLossError(absl::StrCat(
              "worker ", info_.address, " sent a bad chunk: ", decoded.status().message())));
          ctx_.TryCancel();
          break;
        }
        e.elements = *std::move(decoded);
        Push(std::move(e));
        const int64_t decode_end = ThreadCpuNanos();
        decode_cpu_ns_.fetch_add(decode_end - cpu, std::memory_order_relaxed);
        cpu = decode_end;
      } else if (msg.has_split_done()) {
        const proto::SplitDone& d = msg.split_done();
        StreamEvent e;
        e.kind = StreamEvent::Kind::kSplitDone;
        e.split_id = d.split_id();
        for (const proto::SkippedSample& s : d.skipped()) {
          // An older worker sends no kind: its skipped samples count as failed ones.
          const ErrorKind kind = ErrorKindFromWire(s.kind());
          e.skipped.push_back({SampleId{s.epoch(), s.index()}, s.reason(),
                               kind == ErrorKind::kNone ? ErrorKind::kData : kind});
        }
        Push(std::move(e));
      } else if (msg.has_metrics()) {
        StreamEvent e;
        e.kind = StreamEvent::Kind::kMetrics;
        e.cpu_share = msg.metrics().cpu_share();
        e.cpu_ns = msg.metrics().cpu_ns();
        for (const proto::OpMetrics& o : msg.metrics().ops()) {
          WorkerOpMetrics m;
          m.name = o.name();
          m.position = o.position();
          m.samples = o.samples();
          m.cpu_ns = o.cpu_ns();
          m.bytes_out = o.bytes_out();
          m.errors = o.errors();
          e.metrics.push_back(std::move(m));
        }
        Push(std::move(e));
      } else if (msg.has_error()) {
        Fail(WithKind(Status(static_cast<absl::StatusCode>(msg.error().code()),
                             absl::StrCat("worker ", info_.address, ": ", msg.error().message())),
                      ErrorKindFromWire(msg.error().kind())));
        ctx_.TryCancel();
        break;
      } else if (msg.has_draining()) {
        StreamEvent e;
        e.kind = StreamEvent::Kind::kDraining;
        e.deadline_s = msg.draining().deadline_s();
        e.held_splits = static_cast<int>(msg.draining().held_splits());
        {
          std::lock_guard<std::mutex> lock(mu_);
          draining_ = true;
        }
        Push(std::move(e));
      } else if (msg.has_split_returned()) {
        StreamEvent e;
        e.kind = StreamEvent::Kind::kSplitReturned;
        e.split_id = msg.split_returned().split_id();
        e.reason = msg.split_returned().reason();
        Push(std::move(e));
      } else if (msg.has_drained()) {
        // Everything the worker held is done or returned: end the stream from this side.
        drained = true;
        ctx_.TryCancel();
        break;
      }
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      reader_ended_ = true;
      writer_cv_.notify_all();
      events_cv_.notify_all();
    }
    writer.join();
    // No region is given back to a worker whose stream ended: the views hold what they hold.
    if (bulk_ != nullptr && bulk_->slot_arena() != nullptr) bulk_->slot_arena()->Close();
    grpc::Status status = stream_->Finish();
    if (drained) {
      Fail(absl::UnavailableError(absl::StrCat(
          "worker ", info_.address,
          " drained: it is shutting down, and every split it held was done or returned")));
    } else if (status.ok()) {
      Fail(absl::UnavailableError(absl::StrCat("worker ", info_.address, " ended the stream")));
    } else {
      Fail(WorkerError(info_.address, status));  // mid-stream: not a handshake
    }
  }

  WorkerInfo info_;
  std::shared_ptr<grpc::Channel> channel_;
  const size_t max_send_;
  const TlsUse tls_;
  double lease_s_ = 0;        // set in Start, before the threads
  int64_t heartbeat_ns_ = 0;  // 0: no heartbeats
  std::atomic<int64_t> heartbeats_sent_{0};
  grpc::ClientContext ctx_;
  std::unique_ptr<grpc::ClientReaderWriter<proto::ClientMessage, IncomingMessage>> stream_;
  std::thread reader_;
  std::atomic<int64_t> bytes_received_{0};
  std::atomic<int64_t> read_cpu_ns_{0};
  std::atomic<int64_t> decode_cpu_ns_{0};
  // The bulk data channel; set in Start, before the threads.
  std::unique_ptr<BulkConnection> bulk_;
  std::map<int, std::shared_ptr<BatchSlots>> land_slots_;  // set in Start
  bool batches_ = false;  // set in Start: the cut is after batching, a payload is a batch
  std::atomic<int64_t> bulk_bytes_received_{0};
  size_t max_receive_ = 0;  // the largest payload taken (0: no limit)

  std::mutex mu_;
  std::condition_variable events_cv_;  // NextFor waits here for events_ (or a failure)
  std::condition_variable writer_cv_;  // WriteLoop waits here for something to send
  std::deque<StreamEvent> events_;
  std::deque<proto::ClientMessage> outgoing_;
  CreditBatcher credit_;  // bytes taken by NextFor, not yet credited (its window: Start)
  bool failed_ = false;
  bool draining_ = false;  // the worker said it drains: a failure keeps the events received
  bool reader_ended_ = false;
  Status failure_;
};

}  // namespace

namespace {

// A channel to the worker, connected (or the reason it is not).
StatusOr<std::shared_ptr<grpc::Channel>> ConnectChannel(const ConnectOptions& connect) {
  KeepGrpcInitialized();
  const std::string& address = connect.address;
  std::shared_ptr<grpc::ChannelCredentials> creds;
  if (!connect.tls_ca_file.empty()) {
    // gRPC would only retry a bad key for ever: name the file instead.
    SLUICE_RETURN_IF_ERROR(CheckPemCertificates(connect.tls_ca_file, "--tls-ca"));
    if (!connect.tls_cert_file.empty() && !connect.tls_key_file.empty()) {
      SLUICE_RETURN_IF_ERROR(
          CheckPemKeyPair(connect.tls_cert_file, "--tls-cert", connect.tls_key_file, "--tls-key"));
    }
    grpc::SslCredentialsOptions ssl;
    SLUICE_ASSIGN_OR_RETURN(ssl.pem_root_certs, ReadTextFile(connect.tls_ca_file));
    if (!connect.tls_cert_file.empty() || !connect.tls_key_file.empty()) {
      if (connect.tls_cert_file.empty() || connect.tls_key_file.empty()) {
        return absl::InvalidArgumentError("a client certificate needs both cert and key files");
      }
      SLUICE_ASSIGN_OR_RETURN(ssl.pem_cert_chain, ReadTextFile(connect.tls_cert_file));
      SLUICE_ASSIGN_OR_RETURN(ssl.pem_private_key, ReadTextFile(connect.tls_key_file));
    }
    creds = grpc::SslCredentials(ssl);
  } else {
    creds = grpc::InsecureChannelCredentials();
  }
  grpc::ChannelArguments args;
  const int max_message = static_cast<int>(
      std::min<size_t>(connect.max_message_bytes, std::numeric_limits<int>::max()));
  args.SetMaxReceiveMessageSize(max_message);
  args.SetMaxSendMessageSize(-1);  // the worker's limit is checked in SendSplit
  // A fresh connection per stream: a worker that restarts is reached anew.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  // Keepalive (grpc_worker_server.h): a stopped worker or a dead link fails the stream even
  // when no data is due; pings go on without calls and without data in between.
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, kKeepaliveTimeMs);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, kKeepaliveTimeoutMs);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  if (!connect.tls_ca_file.empty() && !connect.tls_server_name.empty()) {
    args.SetSslTargetNameOverride(connect.tls_server_name);
  }
  std::shared_ptr<grpc::Channel> channel = grpc::CreateCustomChannel(address, creds, args);

  if (!channel->WaitForConnected(DeadlineIn(connect.connect_timeout_s))) {
    // Ask once without waiting, to learn why (refused, TLS failure, ...).
    grpc::ClientContext ctx;
    ctx.set_deadline(DeadlineIn(2));
    proto::GetInfoRequest req;
    proto::GetInfoResponse resp;
    grpc::Status s = proto::Worker::NewStub(channel)->GetInfo(&ctx, req, &resp);
    if (s.ok() || s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
      return absl::UnavailableError(absl::StrCat("worker ", address,
                                                 " unreachable: no connection within ",
                                                 connect.connect_timeout_s, " s"));
    }
    return WorkerError(address, s, TlsOf(connect));
  }
  return channel;
}

// A worker that answers GetInfo while draining is leaving: it is not to be planned with or
// opened.
Status DrainingError(const std::string& address) {
  return absl::UnavailableError(
      absl::StrCat("worker ", address, " is draining (shutting down): it opens no new sessions"));
}

// The worker's GetInfo, with the connect timeout and the bearer token.
StatusOr<proto::GetInfoResponse> GetInfo(const ConnectOptions& connect, proto::Worker::Stub& stub,
                                         const std::string& check_path = "") {
  grpc::ClientContext ctx;
  ctx.set_deadline(DeadlineIn(connect.connect_timeout_s));
  if (!connect.token.empty()) ctx.AddMetadata("authorization", "Bearer " + connect.token);
  proto::GetInfoRequest req;
  req.set_client_version(SluiceVersion());
  req.set_check_path(check_path);
  req.set_client_id(ProcessClientId());
  proto::GetInfoResponse resp;
  grpc::Status s = stub.GetInfo(&ctx, req, &resp);
  if (!s.ok()) return WorkerError(connect.address, s, TlsOf(connect));
  return resp;
}

}  // namespace

uint64_t ProcessClientId() {
  static const uint64_t id = [] {
    std::random_device device;
    uint64_t v = 0;
    while (v == 0) v = (static_cast<uint64_t>(device()) << 32) ^ device();
    return v;
  }();
  return id;
}

StatusOr<LinkProbe> ProbeWorker(const ConnectOptions& connect, double target_s, double max_s,
                                const std::string& check_path, std::mutex* one_at_a_time) {
  int64_t start = NowNanos();
  SLUICE_ASSIGN_OR_RETURN(std::shared_ptr<grpc::Channel> channel, ConnectChannel(connect));
  std::unique_ptr<proto::Worker::Stub> stub = proto::Worker::NewStub(channel);
  LinkProbe probe;
  probe.info.address = connect.address;
  uint64_t limit = 0;
  {
    SLUICE_ASSIGN_OR_RETURN(proto::GetInfoResponse resp, GetInfo(connect, *stub, check_path));
    if (resp.draining()) return DrainingError(connect.address);
    if (resp.path_readable() != 0) probe.can_read = resp.path_readable() == 1;
    probe.read_error = resp.path_error();
    probe.read_limit_bytes_per_s = resp.read_limit_bytes_per_s();
    probe.store_bytes_per_s = resp.store_bytes_per_s();
    probe.info.version = resp.version();
    probe.info.ops.assign(resp.ops().begin(), resp.ops().end());
    probe.info.cpu_budget = resp.cpu_budget();
    probe.info.active_session_weight = resp.active_session_weight();
    probe.info.threads = resp.threads();
    limit = std::min<uint64_t>(resp.max_message_bytes(), connect.max_message_bytes);
  }
  limit = limit > 8192 ? limit - 8192 : 0;
  // One timed Probe call; returns seconds, or an error. The reply stays the raw bytes gRPC
  // received (no parse, no copy), as the chunks of a real stream do.
  const grpc::internal::RpcMethod method("/sluice.rpc.proto.Worker/Probe",
                                         grpc::internal::RpcMethod::NORMAL_RPC, channel);
  limit = std::min<uint64_t>(limit, kMaxProbeBytes);
  auto call = [&](uint64_t bytes) -> StatusOr<double> {
    grpc::ClientContext ctx;
    ctx.set_deadline(DeadlineIn(std::max(1.0, 2 * max_s)));
    if (!connect.token.empty()) ctx.AddMetadata("authorization", "Bearer " + connect.token);
    proto::ProbeRequest req;
    req.set_bytes(bytes);
    grpc::ByteBuffer resp;
    // The clock's window holds the wait's: a wait counted between the schedstat reading and
    // the clock's (the reading is a file read; a thread that shares its CPU can be preempted
    // there for a whole time slice) would otherwise be taken off a call that did not contain
    // it, and read the link faster than it is, or clamp the call's time to nothing.
    const int64_t t0 = NowNanos();
    const std::optional<SchedTimes> s0 = ThreadSchedTimes();
    grpc::Status s = grpc::internal::BlockingUnaryCall<proto::ProbeRequest, grpc::ByteBuffer>(
        channel.get(), method, &ctx, req, &resp);
    const std::optional<SchedTimes> s1 = ThreadSchedTimes();
    const double seconds = (NowNanos() - t0) / 1e9;
    if (!s.ok()) return WorkerError(connect.address, s);
    if (resp.Length() < bytes) {
      return absl::UnavailableError(absl::StrCat("worker ", connect.address, ": probe reply of ",
                                                 resp.Length(), " bytes, asked for ", bytes));
    }
    // The time this thread (which reads the reply) spent runnable but waiting for a CPU is
    // the trainer's, not the link's (kLinkProbeTargetS's note).
    const double waited = std::clamp(
        s0.has_value() && s1.has_value() ? (s1->wait_ns - s0->wait_ns) / 1e9 : 0.0, 0.0, seconds);
    probe.cpu_wait_s += waited;
    return seconds - waited;
  };
  std::unique_lock<std::mutex> turn;
  if (one_at_a_time != nullptr) {
    turn = std::unique_lock<std::mutex>(*one_at_a_time);
    start = NowNanos();
  }
  const auto elapsed = [&] { return (NowNanos() - start) / 1e9; };
  double rtt = 1e9;
  for (int i = 0; i < 3; ++i) {
    SLUICE_ASSIGN_OR_RETURN(double t, call(0));
    rtt = std::min(rtt, t);
  }
  probe.rtt_s = rtt;
  // A reading counts only when moving the bytes took longer than the empty call and than
  // a scheduler's time slice (a few ms on a loaded machine): below that, the round trip's
  // own jitter is most of what was timed (1 us left after the RTT had read 64 KiB as
  // 65 GB/s on a 1 Gbit link). Without a reading that counts, the rate of the longest call
  // with its RTT left in stands (a lower bound), and with no call long enough to time, the
  // link is "not measured" (bytes_per_s 0): never a figure no link has.
  constexpr double kMinTransferS = 2e-3;
  const auto rate_of = [&](uint64_t bytes, double t) -> std::optional<double> {
    const double transfer = t - rtt;
    if (!(transfer >= std::max(rtt, kMinTransferS))) return std::nullopt;
    return static_cast<double>(bytes) / transfer;
  };
  // Grow the reply until one takes target_s (or the time or size limit is reached): a reply
  // that is too small measures the latency, not the link.
  uint64_t bytes = std::min<uint64_t>(64 << 10, limit);
  double best = 0;
  // bytes / t (RTT not subtracted) of a call long enough to time: a lower bound on the
  // link's rate, never above it. Used where no reading counts — on a loaded machine the
  // fastest empty call can take as long as the largest reply (16 MiB on loopback).
  double lower = 0;
  const auto note_lower = [&](uint64_t b, double t) {
    if (t >= kMinTransferS) lower = std::max(lower, static_cast<double>(b) / t);
  };
  while (bytes > 0) {
    SLUICE_ASSIGN_OR_RETURN(double t, call(bytes));
    probe.probe_bytes = static_cast<int64_t>(bytes);
    const std::optional<double> rate = rate_of(bytes, t);
    if (rate.has_value()) best = *rate;
    note_lower(bytes, t);
    if ((t >= target_s && rate.has_value()) || bytes >= limit || !(target_s > 0)) break;
    // Aim at target_s from the rate just seen, at least doubling and at most x16 (x16 while
    // the time is still too short to read a rate: the rate that would reach target_s then).
    const double seen = rate.value_or(16.0 * static_cast<double>(bytes) / target_s);
    uint64_t next = static_cast<uint64_t>(std::clamp(seen * target_s * 1.2, 2.0 * bytes,
                                                     16.0 * bytes));
    next = std::min(next, limit);
    // Stay within max_s: the next call should take about next / rate.
    if (elapsed() + static_cast<double>(next) / seen > max_s) break;
    bytes = next;
  }
  // A fresh channel starts with small HTTP/2 windows that grow with traffic. The growing
  // replies above already moved about twice the largest one (a doubling series); one repeat
  // of the largest, while time allows, keeps the better of two readings taken on grown
  // windows. More repeats read no faster and cost the trainer's CPU.
  if (bytes > 0 && best > 0 && elapsed() + static_cast<double>(bytes) / best <= max_s) {
    SLUICE_ASSIGN_OR_RETURN(double t, call(bytes));
    best = std::max(best, rate_of(bytes, t).value_or(0));
    note_lower(bytes, t);
  }
  probe.bytes_per_s = best > 0 ? best : lower;
  probe.probe_s = elapsed();
  return probe;
}

StatusOr<std::unique_ptr<RemoteStream>> RemoteStream::Open(const ConnectOptions& connect,
                                                           const SessionConfig& session) {
  const std::string& address = connect.address;
  SLUICE_ASSIGN_OR_RETURN(std::shared_ptr<grpc::Channel> channel, ConnectChannel(connect));

  WorkerInfo info;
  info.address = address;
  size_t max_send = 0;
  {
    std::unique_ptr<proto::Worker::Stub> stub = proto::Worker::NewStub(channel);
    SLUICE_ASSIGN_OR_RETURN(proto::GetInfoResponse resp, GetInfo(connect, *stub));
    if (resp.draining()) return DrainingError(address);
    info.version = resp.version();
    info.ops.assign(resp.ops().begin(), resp.ops().end());
    info.cpu_budget = resp.cpu_budget();
    info.threads = resp.threads();
    max_send = resp.max_message_bytes();
  }
  auto stream =
      std::make_unique<GrpcRemoteStream>(std::move(info), channel, max_send, TlsOf(connect));
  SLUICE_RETURN_IF_ERROR(stream->Start(connect, session));
  return std::unique_ptr<RemoteStream>(std::move(stream));
}

}  // namespace sluice::rpc
