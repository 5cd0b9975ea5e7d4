#include "sluice/rpc/grpc_worker_server.h"

#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/security/server_credentials.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "sluice/core/clock.h"
#include "sluice/core/error_kind.h"
#include "sluice/rpc/bulk_channel.h"
#include "sluice/rpc/grpc_library.h"
#include "sluice/rpc/outgoing_message.h"
#include "sluice/rpc/tls_files.h"
#include "sluice/rpc/worker.grpc.pb.h"

namespace sluice::rpc {
namespace {

grpc::Status ToGrpc(const Status& s) {
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

Codec FromProto(proto::Codec c) {
  switch (c) {
    case proto::LZ4:
      return Codec::kLz4;
    case proto::ZSTD:
      return Codec::kZstd;
    default:
      return Codec::kNone;
  }
}

void ToOutgoing(WorkerOutput& out, OutgoingMessage* outgoing) {
  proto::WorkerMessage* msg = &outgoing->message;
  switch (out.kind) {
    case WorkerOutput::Kind::kChunk: {
      if (!out.chunk.pieces.empty()) {
        outgoing->in_place = true;
        outgoing->split_id = out.split_id;
        outgoing->header = std::move(out.chunk.header);
        outgoing->pieces = std::move(out.chunk.pieces);
        break;
      }
      proto::Chunk* c = msg->mutable_chunk();
      c->set_split_id(out.split_id);
      c->set_header(std::move(out.chunk.header));
      c->set_payload(std::move(out.chunk.payload));
      break;
    }
    case WorkerOutput::Kind::kSplitDone: {
      proto::SplitDone* d = msg->mutable_split_done();
      d->set_split_id(out.split_id);
      d->set_delivered(out.delivered);
      for (const SkippedSample& skipped : out.skipped) {
        proto::SkippedSample* s = d->add_skipped();
        s->set_epoch(skipped.id.epoch);
        s->set_index(skipped.id.index);
        s->set_reason(skipped.reason);
        s->set_kind(static_cast<int32_t>(skipped.kind));
      }
      break;
    }
    case WorkerOutput::Kind::kMetrics: {
      proto::Metrics* m = msg->mutable_metrics();
      m->set_cpu_share(out.cpu_share);
      m->set_cpu_ns(out.cpu_ns);
      for (const WorkerOpMetrics& op : out.metrics) {
        proto::OpMetrics* o = m->add_ops();
        o->set_name(op.name);
        o->set_position(op.position);
        o->set_samples(op.samples);
        o->set_cpu_ns(op.cpu_ns);
        o->set_bytes_out(op.bytes_out);
        o->set_errors(op.errors);
      }
      break;
    }
    case WorkerOutput::Kind::kError: {
      proto::Error* e = msg->mutable_error();
      e->set_code(static_cast<int>(out.error.code()));
      e->set_message(std::string(out.error.message()));
      e->set_kind(static_cast<int32_t>(KindOf(out.error)));
      break;
    }
    case WorkerOutput::Kind::kDraining: {
      proto::Draining* d = msg->mutable_draining();
      d->set_deadline_s(out.deadline_s);
      d->set_held_splits(static_cast<uint32_t>(out.held_splits));
      break;
    }
    case WorkerOutput::Kind::kSplitReturned: {
      proto::SplitReturned* r = msg->mutable_split_returned();
      r->set_split_id(out.split_id);
      r->set_reason(std::move(out.reason));
      break;
    }
    case WorkerOutput::Kind::kDrained:
      msg->mutable_drained();
      break;
  }
}

}  // namespace

StatusOr<std::string> ReadTextFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

StatusOr<std::string> ReadTokenFile(const std::string& path) {
  SLUICE_ASSIGN_OR_RETURN(std::string text, ReadTextFile(path));
  std::string line = text.substr(0, text.find('\n'));
  std::string token(absl::StripAsciiWhitespace(line));
  if (token.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("token file ", path, " is empty"));
  }
  return token;
}

bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i]) ^ static_cast<unsigned char>(b[i]);
  }
  return diff == 0;
}

// Takes a chunk's payload out of `msg` for the bulk channel: an in-place chunk keeps its
// pieces (sent after the message) and says so; a chunk message's payload moves to `payload`
// and its size to Chunk.bulk_bytes.
void MoveToBulk(OutgoingMessage* msg, std::string* payload) {
  if (msg->in_place) {
    msg->bulk = true;
    return;
  }
  proto::Chunk* c = msg->message.mutable_chunk();
  *payload = std::move(*c->mutable_payload());
  c->clear_payload();
  c->set_bulk_bytes(payload->size());
}

std::vector<BulkPiece> BulkPieces(const OutgoingMessage& msg, const std::string& payload) {
  std::vector<BulkPiece> pieces;
  if (msg.in_place) {
    for (const PayloadPiece& p : msg.pieces) pieces.push_back({p.data, p.size});
  } else {
    pieces.push_back({reinterpret_cast<const uint8_t*>(payload.data()), payload.size()});
  }
  return pieces;
}

// The Worker service (worker.proto), registered by hand rather than through the generated
// base class so that Process can have OutgoingMessage as its response type: chunks then go
// out without copying their payload. The bytes on the wire are those of the proto.
class GrpcWorkerServer::Impl final : public grpc::Service {
 public:
  using Stream = grpc::ServerReaderWriter<OutgoingMessage, proto::ClientMessage>;

  Impl(WorkerService* service, std::string token, int max_pending, double open_timeout_s,
       std::unique_ptr<BulkListener> bulk)
      : service_(service),
        bulk_(std::move(bulk)),
        token_(std::move(token)),
        max_pending_(max_pending),
        open_timeout_ns_(static_cast<int64_t>(open_timeout_s * 1e9)) {
    // Checks the pending streams a few times per timeout (at most every second).
    const double period_s = std::clamp(open_timeout_s / 4, 0.01, 1.0);
    watcher_ = std::thread([this, period_s] { WatchPending(period_s); });
    AddMethod(new grpc::internal::RpcServiceMethod(
        "/sluice.rpc.proto.Worker/GetInfo", grpc::internal::RpcMethod::NORMAL_RPC,
        new grpc::internal::RpcMethodHandler<Impl, proto::GetInfoRequest,
                                             proto::GetInfoResponse>(
            [](Impl* self, grpc::ServerContext* ctx, const proto::GetInfoRequest* request,
               proto::GetInfoResponse* response) { return self->GetInfo(ctx, request, response); },
            this)));
    AddMethod(new grpc::internal::RpcServiceMethod(
        "/sluice.rpc.proto.Worker/Process", grpc::internal::RpcMethod::BIDI_STREAMING,
        new grpc::internal::BidiStreamingHandler<Impl, proto::ClientMessage, OutgoingMessage>(
            [](Impl* self, grpc::ServerContext* ctx, Stream* stream) {
              return self->Process(ctx, stream);
            },
            this)));
    AddMethod(new grpc::internal::RpcServiceMethod(
        "/sluice.rpc.proto.Worker/Probe", grpc::internal::RpcMethod::NORMAL_RPC,
        new grpc::internal::RpcMethodHandler<Impl, proto::ProbeRequest, grpc::ByteBuffer>(
            [](Impl* self, grpc::ServerContext* ctx, const proto::ProbeRequest* request,
               grpc::ByteBuffer* response) { return self->Probe(ctx, request, response); },
            this)));
  }

  ~Impl() override {
    {
      std::lock_guard<std::mutex> lock(pending_mu_);
      stop_ = true;
      pending_cv_.notify_all();
    }
    watcher_.join();
  }

  int pending_streams() const {
    std::lock_guard<std::mutex> lock(pending_mu_);
    return static_cast<int>(pending_.size());
  }

  int bulk_port() const { return bulk_ != nullptr ? bulk_->port() : 0; }

  // Answers with the bytes asked for, up to the message limit (less room for the framing) and
  // kMaxProbeBytes. The reply is a ProbeResponse on the wire, sent the way chunks are sent:
  // a small header slice and the payload from one shared zero-filled buffer, so the probe
  // times the link and the socket, not building a message.
  grpc::Status Probe(grpc::ServerContext* ctx, const proto::ProbeRequest* request,
                     grpc::ByteBuffer* response) {
    if (grpc::Status s = CheckToken(ctx); !s.ok()) return s;
    const uint64_t limit = service_->options().max_message_bytes > 4096
                               ? service_->options().max_message_bytes - 4096
                               : 0;
    const uint64_t n = std::min<uint64_t>({request->bytes(), limit, kMaxProbeBytes});
    static const char* const kZeros = new char[kMaxProbeBytes]();  // pages stay shared
    // Field 1, length-delimited, then the length as a varint.
    char header[16];
    size_t h = 0;
    header[h++] = 0x0a;
    for (uint64_t v = n;; v >>= 7) {
      header[h++] = static_cast<char>(v < 0x80 ? v : (v & 0x7f) | 0x80);
      if (v < 0x80) break;
    }
    grpc::Slice slices[2] = {grpc::Slice(header, h),
                             grpc::Slice(kZeros, n, grpc::Slice::STATIC_SLICE)};
    *response = grpc::ByteBuffer(slices, n > 0 ? 2 : 1);
    return grpc::Status::OK;
  }

  grpc::Status GetInfo(grpc::ServerContext* ctx, const proto::GetInfoRequest* request,
                       proto::GetInfoResponse* response) {
    if (grpc::Status s = CheckToken(ctx); !s.ok()) return s;
    if (!request->check_path().empty()) {
      // Whether remote_read can work here: the trainer's first source file, mapped under
      // the data root as read_file would, must be readable.
      if (Status readable = service_->CheckReadable(request->check_path()); !readable.ok()) {
        response->set_path_readable(2);
        response->set_path_error(std::string(readable.message()));
      } else {
        response->set_path_readable(1);
        // What the worker's store delivers (a URL's): the planner's storage bound for it.
        if (StatusOr<double> rate = service_->MeasureReadRate(request->check_path()); rate.ok()) {
          response->set_store_bytes_per_s(*rate);
        }
      }
    }
    response->set_read_limit_bytes_per_s(service_->options().read_limit_bytes_per_s);
    WorkerInfo info = service_->Info(request->client_id());
    response->set_version(info.version);
    for (const std::string& op : info.ops) response->add_ops(op);
    response->set_cpu_budget(info.cpu_budget);
    response->set_active_session_weight(info.active_session_weight);
    response->set_threads(info.threads);
    response->set_max_message_bytes(service_->options().max_message_bytes);
    response->set_max_sessions(service_->options().max_sessions);
    response->set_open_sessions(service_->open_sessions());
    response->set_draining(service_->draining());
    return grpc::Status::OK;
  }

  grpc::Status Process(grpc::ServerContext* ctx, Stream* stream) {
    if (grpc::Status s = CheckToken(ctx); !s.ok()) return s;
    // Until its Open arrives, the stream counts against the cap of pending streams and is
    // cancelled by the watcher after the open timeout.
    {
      std::lock_guard<std::mutex> lock(pending_mu_);
      if (static_cast<int>(pending_.size()) >= max_pending_) {
        return grpc::Status(
            grpc::StatusCode::RESOURCE_EXHAUSTED,
            absl::StrCat("worker has ", max_pending_,
                         " streams waiting for their Open message (--max-pending-streams ",
                         max_pending_, "); refusing another: try again later"));
      }
      pending_[ctx] = NowNanos() + open_timeout_ns_;
    }
    proto::ClientMessage first;
    const bool got_first = stream->Read(&first);
    bool timed_out = false;
    {
      std::lock_guard<std::mutex> lock(pending_mu_);
      timed_out = timed_out_.erase(ctx) > 0;
      pending_.erase(ctx);
    }
    if (!got_first) {
      if (timed_out) {
        return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                            "no Open message within the worker's open timeout");
      }
      return grpc::Status::OK;  // closed before opening
    }
    if (!first.has_open()) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          "the first message of a session must be Open");
    }
    const proto::Open& o = first.open();
    OpenRequest request;
    request.spec_json = o.spec_json();
    request.cut = o.cut();
    request.read_mode =
        o.read_mode() == proto::LOCAL_READ ? ReadMode::kLocalRead : ReadMode::kRemoteRead;
    request.compression = FromProto(o.compression());
    request.max_inflight_bytes = o.max_inflight_bytes();
    request.client_version = o.client_version();
    request.max_message_bytes = o.max_message_bytes();
    request.weight = o.weight() != 0 ? o.weight() : 1;  // 0: a trainer that sends none
    request.client_id = o.client_id();
    request.peer = ctx->peer();
    auto opened = service_->OpenSession(request);
    if (!opened.ok()) {
      service_->CountRefused(opened.status());
      return ToGrpc(opened.status());
    }
    std::shared_ptr<WorkerSession> session = *std::move(opened);
    // When the lease expires and this handler is stuck (a write to a trainer that stopped
    // reading), the service cancels the call through this; `call` is cleared before ctx goes.
    // A bulk channel's connection, once taken, is shut down with it (a send blocked on a
    // trainer that stopped reading returns).
    struct Call {
      std::mutex mu;
      grpc::ServerContext* ctx;
      int bulk_fd = -1;
    };
    auto call = std::make_shared<Call>();
    call->ctx = ctx;
    session->SetExpiryHook([call] {
      std::lock_guard<std::mutex> lock(call->mu);
      if (call->ctx != nullptr) call->ctx->TryCancel();
      if (call->bulk_fd >= 0) shutdown(call->bulk_fd, SHUT_RDWR);
    });
    const auto forget_call = [&call] {
      std::lock_guard<std::mutex> lock(call->mu);
      call->ctx = nullptr;
    };

    OutgoingMessage reply;
    proto::Opened* op = reply.message.mutable_opened();
    op->set_worker_version(session->info().worker_version);
    op->set_cpu_budget(session->info().cpu_budget);
    op->set_threads(session->info().threads);
    op->set_max_inflight_bytes(session->info().max_inflight_bytes);
    op->set_session_lease_s(session->info().session_lease_s);
    // The bulk channel, when the trainer asks: chunks go on it once its connection arrives
    // (those before go on the stream, as without one).
    std::string bulk_key;
    std::unique_ptr<BulkConnection> bulk_conn;
    if (o.bulk() && bulk_ != nullptr) {
      bulk_key = bulk_->Expect();
      op->set_bulk_port(static_cast<uint32_t>(bulk_->port()));
      op->set_bulk_key(bulk_key);
      op->set_bulk_local(bulk_->local_name());
    }
    const auto end_bulk = [&] {
      if (bulk_key.empty()) return;
      bulk_->Forget(bulk_key);
      std::lock_guard<std::mutex> lock(call->mu);
      bulk_conn.reset();
      call->bulk_fd = -1;
    };
    if (!stream->Write(reply)) {
      session->Cancel();
      end_bulk();
      forget_call();
      return grpc::Status(grpc::StatusCode::CANCELLED, "the trainer went away");
    }

    std::mutex mu;
    std::condition_variable cv;
    bool reader_done = false;
    // The trainer's BulkState: 0 not said yet, 1 connected, 2 not. It comes before any split,
    // so it is known before the first chunk.
    std::atomic<int> bulk_state{0};
    std::thread reader([&] {
      proto::ClientMessage msg;
      while (stream->Read(&msg)) {
        if (msg.has_split()) {
          proto::Split* split = msg.mutable_split();
          Status s = session->AddEncodedSplit(split->split_id(), split->header(),
                                              std::move(*split->mutable_payload()));
          // A split refused while draining goes back to the trainer in band (SplitReturned).
          if (!s.ok() && !IsDrainingRefusal(s)) session->Fail(s);
        } else if (msg.has_credit()) {
          session->AddCredit(msg.credit().bytes());
        } else if (msg.has_heartbeat()) {
          session->Heartbeat();
        } else if (msg.has_bulk_state()) {
          // Shared slots that came with the trainer's connection are taken up before its first
          // split is read, so that every sample the session finishes is written into them (the
          // connection itself is taken where it is sent on, at the first output).
          if (msg.bulk_state().connected() && !bulk_key.empty()) {
            session->AttachSharedSlots(bulk_->SlotsWithin(bulk_key, kBulkHelloTimeoutS));
          }
          bulk_state.store(msg.bulk_state().connected() ? 1 : 2);
        } else {
          session->Fail(absl::InvalidArgumentError("unexpected message after Open"));
        }
      }
      session->CloseInput();
      std::lock_guard<std::mutex> lock(mu);
      reader_done = true;
      cv.notify_all();
    });

    grpc::Status result = grpc::Status::OK;
    bool last_sent = false;  // an Error or Drained: the trainer ends the stream
    while (true) {
      WorkerOutput out;
      WorkerSession::Next next = session->NextOutput(&out, 200);
      if (next == WorkerSession::Next::kEnd) break;
      if (next == WorkerSession::Next::kTimeout) {
        if (ctx->IsCancelled()) break;
        continue;
      }
      const bool is_error = out.kind == WorkerOutput::Kind::kError;
      if (is_error) result = ToGrpc(out.error);
      if (bulk_conn == nullptr && !bulk_key.empty() && bulk_state.load() != 0) {
        // Connected, its hello may still be on its way to the listener: wait for it (bounded;
        // without it, chunks stay on the stream). Not connected: the stream it is.
        std::unique_ptr<BulkConnection> c =
            bulk_state.load() == 1 ? bulk_->TakeWithin(bulk_key, kBulkHelloTimeoutS) : nullptr;
        if (c == nullptr) {
          bulk_->Forget(bulk_key);
          bulk_key.clear();
        }
        std::lock_guard<std::mutex> lock(call->mu);
        bulk_conn = std::move(c);
        call->bulk_fd = bulk_conn != nullptr ? bulk_conn->fd() : -1;
      }
      // A chunk's send time (message and payload) sizes the next chunks to the way it went.
      const bool chunk = out.kind == WorkerOutput::Kind::kChunk;
      const size_t chunk_bytes = chunk ? out.chunk.wire_bytes() : 0;
      const int64_t send_from = chunk ? NowNanos() : 0;
      OutgoingMessage msg;
      ToOutgoing(out, &msg);
      // On the bulk channel: the chunk's message first, then its payload, so the trainer
      // knows whose bytes come next.
      std::string bulk_payload;
      const bool via_bulk = bulk_conn != nullptr && chunk;
      if (via_bulk) MoveToBulk(&msg, &bulk_payload);
      if (!stream->Write(msg)) {
        result = grpc::Status(grpc::StatusCode::CANCELLED, "the trainer went away");
        break;
      }
      if (via_bulk) {
        if (Status sent = bulk_conn->Send(BulkPieces(msg, bulk_payload)); !sent.ok()) {
          result = grpc::Status(grpc::StatusCode::CANCELLED,
                                absl::StrCat("the trainer went away: ", sent.message()));
          break;
        }
      }
      if (chunk) session->NoteChunkSent(chunk_bytes, (NowNanos() - send_from) / 1e9);
      if (is_error || out.kind == WorkerOutput::Kind::kDrained) {
        last_sent = true;
        break;
      }
    }
    session->Cancel();
    {
      // After an Error or Drained, the trainer closes its side; give it a moment before
      // cutting the stream so the message is delivered rather than raced by the cancellation.
      std::unique_lock<std::mutex> lock(mu);
      cv.wait_for(lock, std::chrono::seconds(last_sent ? 5 : 0), [&] { return reader_done; });
      if (!reader_done) ctx->TryCancel();
    }
    reader.join();
    end_bulk();
    forget_call();
    return result;
  }

 private:
  grpc::Status CheckToken(grpc::ServerContext* ctx) const {
    if (token_.empty()) return grpc::Status::OK;
    const auto& md = ctx->client_metadata();
    auto it = md.find("authorization");
    if (it == md.end()) {
      service_->CountRefused(absl::UnauthenticatedError("missing bearer token"));
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                          "missing bearer token: this worker requires 'authorization: Bearer "
                          "<token>' (the trainer's --token-file)");
    }
    const std::string_view got(it->second.data(), it->second.size());
    const std::string expected = "Bearer " + token_;
    if (!ConstantTimeEquals(got, expected)) {
      service_->CountRefused(absl::UnauthenticatedError("wrong bearer token"));
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "wrong bearer token");
    }
    return grpc::Status::OK;
  }

  // Cancels the streams whose Open is overdue.
  void WatchPending(double period_s) {
    std::unique_lock<std::mutex> lock(pending_mu_);
    while (!stop_) {
      pending_cv_.wait_for(lock, std::chrono::duration<double>(period_s));
      const int64_t now = NowNanos();
      for (const auto& [ctx, deadline] : pending_) {
        // The handler erases its entry (under this lock) before ctx goes away.
        if (now >= deadline && timed_out_.insert(ctx).second) ctx->TryCancel();
      }
    }
  }

  WorkerService* service_;
  std::unique_ptr<BulkListener> bulk_;  // null: no bulk channel offered
  const std::string token_;
  const int max_pending_;
  const int64_t open_timeout_ns_;
  mutable std::mutex pending_mu_;
  std::condition_variable pending_cv_;
  std::map<grpc::ServerContext*, int64_t> pending_ ABSL_GUARDED_BY(pending_mu_);  // -> deadline
  std::set<grpc::ServerContext*> timed_out_ ABSL_GUARDED_BY(pending_mu_);
  bool stop_ ABSL_GUARDED_BY(pending_mu_) = false;
  std::thread watcher_;
};

StatusOr<std::unique_ptr<GrpcWorkerServer>> GrpcWorkerServer::Start(ServerOptions options) {
  std::shared_ptr<grpc::ServerCredentials> creds;
  const bool tls = !options.tls_cert_file.empty() || !options.tls_key_file.empty();
  if (tls) {
    if (options.tls_cert_file.empty() || options.tls_key_file.empty()) {
      return absl::InvalidArgumentError("TLS needs both --tls-cert and --tls-key");
    }
    // gRPC would only fail to listen: say which file is wrong first.
    SLUICE_RETURN_IF_ERROR(
        CheckPemKeyPair(options.tls_cert_file, "--tls-cert", options.tls_key_file, "--tls-key"));
    if (!options.tls_client_ca_file.empty()) {
      SLUICE_RETURN_IF_ERROR(CheckPemCertificates(options.tls_client_ca_file, "--tls-client-ca"));
    }
    grpc::SslServerCredentialsOptions ssl;
    grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
    SLUICE_ASSIGN_OR_RETURN(pair.cert_chain, ReadTextFile(options.tls_cert_file));
    SLUICE_ASSIGN_OR_RETURN(pair.private_key, ReadTextFile(options.tls_key_file));
    ssl.pem_key_cert_pairs.push_back(std::move(pair));
    if (!options.tls_client_ca_file.empty()) {
      SLUICE_ASSIGN_OR_RETURN(ssl.pem_root_certs, ReadTextFile(options.tls_client_ca_file));
      ssl.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
    }
    creds = grpc::SslServerCredentials(ssl);
  } else {
    if (!options.tls_client_ca_file.empty()) {
      return absl::InvalidArgumentError("--tls-client-ca needs --tls-cert and --tls-key");
    }
    creds = grpc::InsecureServerCredentials();
  }

  std::unique_ptr<GrpcWorkerServer> server(new GrpcWorkerServer());
  // Draining is NOT_SERVING from the moment it begins, not at the next periodic check.
  GrpcWorkerServer* raw = server.get();
  options.worker.on_drain = [raw, chained = std::move(options.worker.on_drain)] {
    raw->UpdateHealth();
    if (chained) chained();
  };
  server->service_ = std::make_unique<WorkerService>(options.worker);
  std::unique_ptr<BulkListener> bulk;
  // On the listen address's host; a gRPC target that is not host:port (unix:...) gets none.
  const std::optional<std::string> bulk_host = HostOfAddress(options.listen);
  if (options.bulk && !tls && bulk_host.has_value()) {
    SLUICE_ASSIGN_OR_RETURN(
        bulk, BulkListener::Start(*bulk_host, options.bulk_port, options.bulk_shared_memory,
                                  options.shared_slots));
  }
  server->impl_ = std::make_unique<Impl>(server->service_.get(), options.token,
                                         std::max(1, options.max_pending_streams),
                                         options.open_timeout_s, std::move(bulk));
  const int max_message = static_cast<int>(
      std::min<size_t>(options.worker.max_message_bytes, std::numeric_limits<int>::max()));
  KeepGrpcInitialized();
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.listen, creds, &server->port_);
  builder.RegisterService(server->impl_.get());
  builder.SetMaxReceiveMessageSize(max_message);
  builder.SetMaxSendMessageSize(max_message);
  // Keepalive (see kKeepaliveTimeMs): ping silent trainers, and accept their pings.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, kKeepaliveTimeMs);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, kKeepaliveTimeoutMs);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
                             kMinPingIntervalMs);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr || server->port_ == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", options.listen,
                                               " (address in use, or not a local address?)"));
  }
  const size_t colon = options.listen.rfind(':');
  server->address_ = absl::StrCat(options.listen.substr(0, colon == std::string::npos ? 0 : colon),
                                  ":", server->port_);
  server->UpdateHealth();  // NOT_SERVING: starting
  GrpcWorkerServer* self = server.get();
  server->health_thread_ = std::thread([self] {
    std::unique_lock<std::mutex> lock(self->mu_);
    while (!self->shut_down_) {
      self->health_cv_.wait_for(lock, std::chrono::duration<double>(kHealthCheckPeriodS));
      if (self->shut_down_) break;
      lock.unlock();
      self->UpdateHealth();
      lock.lock();
    }
  });
  return server;
}

GrpcWorkerServer::~GrpcWorkerServer() {
  Shutdown(0);
  if (health_thread_.joinable()) health_thread_.join();
}

void GrpcWorkerServer::MarkStarted() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    started_ = true;
  }
  UpdateHealth();
}

std::string GrpcWorkerServer::UpdateHealth() {
  bool started, shut_down;
  {
    std::lock_guard<std::mutex> lock(mu_);
    started = started_;
    shut_down = shut_down_;
  }
  std::string why;
  if (shut_down) {
    why = "shutting down";
  } else if (!started) {
    why = "starting";
  } else if (service_->draining()) {
    why = "draining";
  } else if (const std::string& root = service_->options().data_root; !root.empty()) {
    std::error_code ec;
    if (!std::filesystem::is_directory(root, ec) || access(root.c_str(), R_OK | X_OK) != 0) {
      why = absl::StrCat("data root ", root, " is not a folder this process can read");
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  not_ready_ = why;
  if (server_ != nullptr && !shut_down_) {
    grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService();
    if (health != nullptr) {
      health->SetServingStatus(why.empty());
      health->SetServingStatus(kHealthServiceName, why.empty());
    }
  }
  return why;
}

std::string GrpcWorkerServer::NotReadyReason() const {
  std::lock_guard<std::mutex> lock(mu_);
  return not_ready_;
}

int GrpcWorkerServer::pending_streams() const { return impl_ ? impl_->pending_streams() : 0; }

int GrpcWorkerServer::bulk_port() const { return impl_ ? impl_->bulk_port() : 0; }

void GrpcWorkerServer::Shutdown(double grace_s) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shut_down_) return;
    shut_down_ = true;
    not_ready_ = "shutting down";
    if (server_ != nullptr && server_->GetHealthCheckService() != nullptr) {
      // NOT_SERVING for good: the health service answers so until the server stops.
      server_->GetHealthCheckService()->Shutdown();
    }
  }
  health_cv_.notify_all();
  if (service_) service_->Shutdown();
  if (server_) {
    server_->Shutdown(std::chrono::system_clock::now() +
                      std::chrono::milliseconds(static_cast<int64_t>(grace_s * 1000)));
  }
}

void GrpcWorkerServer::Wait() {
  if (server_) server_->Wait();
}

}  // namespace sluice::rpc
