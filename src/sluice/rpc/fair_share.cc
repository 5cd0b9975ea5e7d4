#include "sluice/rpc/fair_share.h"

#include <algorithm>

namespace sluice::rpc {

void FairShare::Add(uint64_t id, double weight, uint64_t group) {
  Client& c = clients_[id];
  c.weight = weight > 0 ? weight : 1;
  c.group = group;
  c.vtime = std::max(c.vtime, clock_);
}

void FairShare::Remove(uint64_t id) { clients_.erase(id); }

void FairShare::Wait(uint64_t id, int64_t now_ns) {
  auto it = clients_.find(id);
  if (it == clients_.end()) return;
  Client& c = it->second;
  if (c.waiting == 0 && c.serving == 0 && !Active(c, now_ns)) c.vtime = std::max(c.vtime, clock_);
  ++c.waiting;
}

std::optional<uint64_t> FairShare::Next(int64_t now_ns) {
  Client* best = nullptr;
  uint64_t best_id = 0;
  for (auto& [id, c] : clients_) {
    if (c.waiting > 0 && (best == nullptr || c.vtime < best->vtime)) {
      best = &c;
      best_id = id;
    }
  }
  if (best == nullptr) return std::nullopt;
  --best->waiting;
  ++best->serving;
  best->last_ns = now_ns;
  clock_ = std::max(clock_, best->vtime);
  return best_id;
}

void FairShare::Charge(uint64_t id, int64_t cpu_ns, int64_t now_ns) {
  auto it = clients_.find(id);
  if (it == clients_.end()) return;
  Client& c = it->second;
  c.vtime += std::max<int64_t>(0, cpu_ns) / 1e9 / c.weight;
  if (c.serving > 0) --c.serving;
  c.last_ns = now_ns;
}

bool FairShare::Active(const Client& c, int64_t now_ns) const {
  return c.waiting > 0 || c.serving > 0 || (c.last_ns >= 0 && now_ns - c.last_ns <= window_ns_);
}

double FairShare::ActiveWeight(int64_t now_ns, uint64_t exclude_group) const {
  double total = 0;
  for (const auto& [id, c] : clients_) {
    if (Active(c, now_ns) && (exclude_group == 0 || c.group != exclude_group)) total += c.weight;
  }
  return total;
}

double FairShare::Share(uint64_t id, double budget, int64_t now_ns) const {
  auto it = clients_.find(id);
  if (it == clients_.end()) return 0;
  const Client& me = it->second;
  double total = me.weight;  // itself, active or not, and the active clients of other groups
  for (const auto& [other_id, c] : clients_) {
    if (other_id == id || !Active(c, now_ns)) continue;
    if (me.group != 0 && c.group == me.group) continue;
    total += c.weight;
  }
  return budget * me.weight / total;
}

int FairShare::waiting(uint64_t id) const {
  auto it = clients_.find(id);
  return it == clients_.end() ? 0 : it->second.waiting;
}

}  // namespace sluice::rpc
