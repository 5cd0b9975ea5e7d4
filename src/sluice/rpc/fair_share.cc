#include "sluice/rpc/fair_share.h"

#include <algorithm>
#include <limits>

namespace sluice::rpc {

void FairShare::Add(uint64_t id, double weight, uint64_t group, int64_t now_ns) {
  const auto [it, inserted] = clients_.try_emplace(id);
  Client& c = it->second;
  if (inserted) c.added_ns = now_ns;
  c.removed = false;
  c.weight = weight > 0 ? weight : 1;
  c.group = group;
  c.vtime = std::max(c.vtime, clock_);
}

void FairShare::Remove(uint64_t id, int64_t now_ns) {
  auto it = clients_.find(id);
  if (it == clients_.end()) return;
  Client& c = it->second;
  if (!Active(c, now_ns)) {
    clients_.erase(it);
  } else {
    // Active until now; its tasks still queued are dropped by the caller.
    c.removed = true;
    c.waiting = 0;
    c.serving = 0;
    c.last_ns = now_ns;
  }
  Prune(now_ns);
}

void FairShare::Prune(int64_t now_ns) {
  std::erase_if(clients_, [&](const auto& entry) {
    return entry.second.removed && !Active(entry.second, now_ns);
  });
}

void FairShare::Wait(uint64_t id, int64_t now_ns) {
  auto it = clients_.find(id);
  if (it == clients_.end()) return;
  Client& c = it->second;
  if (c.removed) return;
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
  if (c.removed) return;
  c.vtime += std::max<int64_t>(0, cpu_ns) / 1e9 / c.weight;
  if (c.serving > 0) --c.serving;
  c.last_ns = now_ns;
}

bool FairShare::Active(const Client& c, int64_t now_ns) const {
  return c.waiting > 0 || c.serving > 0 || (c.last_ns >= 0 && now_ns - c.last_ns <= window_ns_);
}

double FairShare::PartyWeights(int64_t now_ns, uint64_t skip_id, uint64_t skip_group,
                               int64_t since_ns) const {
  double total = 0;
  std::map<uint64_t, double> groups;  // group -> the largest weight of its active clients
  for (const auto& [id, c] : clients_) {
    if (id == skip_id || !Active(c, now_ns) || (c.removed && c.last_ns < since_ns)) continue;
    if (c.group == 0) {
      total += c.weight;
    } else if (c.group != skip_group) {
      double& w = groups[c.group];
      w = std::max(w, c.weight);
    }
  }
  for (const auto& [group, w] : groups) total += w;
  return total;
}

std::optional<int64_t> FairShare::JoinedNs(uint64_t group) const {
  std::optional<int64_t> joined;
  if (group == 0) return joined;
  for (const auto& [id, c] : clients_) {
    if (c.group == group) joined = std::min(joined.value_or(c.added_ns), c.added_ns);
  }
  return joined;
}

double FairShare::ActiveWeight(int64_t now_ns, uint64_t exclude_group) const {
  const int64_t since = JoinedNs(exclude_group).value_or(std::numeric_limits<int64_t>::max());
  return PartyWeights(now_ns, /*skip_id=*/0, exclude_group, since);
}

double FairShare::Share(uint64_t id, double budget, int64_t now_ns) const {
  auto it = clients_.find(id);
  if (it == clients_.end() || it->second.removed) return 0;
  const Client& me = it->second;
  // Itself, active or not, in place of its party; and the other active parties (those that
  // left since its party joined among them).
  const int64_t since = JoinedNs(me.group).value_or(me.added_ns);
  return budget * me.weight / (me.weight + PartyWeights(now_ns, id, me.group, since));
}

int FairShare::waiting(uint64_t id) const {
  auto it = clients_.find(id);
  return it == clients_.end() ? 0 : it->second.waiting;
}

}  // namespace sluice::rpc
