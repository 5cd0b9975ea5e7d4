// FairShare: which session a worker's free thread serves next, so that sessions whose
// samples cost different amounts of CPU still get the CPU in proportion to their weights.
//
// Each client (a worker session) has a weight (> 0; 1 by default) and a virtual time: the
// CPU it has been charged divided by its weight. A free thread serves the waiting client
// with the smallest virtual time (weighted fair queuing over CPU, as CFS does over tasks).
// A client that starts waiting after an idle spell starts at the virtual time of the
// clients being served, never behind it: idle time is not saved up as credit that would
// later starve the others.
//
// The CPU a client is entitled to (`Share`) is the worker's budget times its weight over the
// weights of the active parties. A party is a group (the sessions of one trainer process;
// group 0: each client is a party of its own) and weighs the largest weight of its active
// clients, so a trainer counts once however many sessions it has open (a plan switch opens
// new ones while the old close; a replaced stream's session may outlive it a moment). A
// client is active while waiting, being served, or served within the activity window (a
// client that paused for less than the window still counts, so a trainer's share does not
// jump between its batches). A newcomer of weight w would get budget * w / (ActiveWeight +
// w) (runtime::EntitledCpu computes that on the trainer).
//
// A client that leaves (`Remove`) while active still counts, in its party, for the rest of
// its activity window: a plan switch closes a trainer's sessions and opens new ones, and for
// that gap the other trainers must not be told that the CPU is theirs (they would re-plan on
// a share lasting a fraction of a second, and their own switch would then do the same to
// this trainer, back and forth). It lingers only for the parties that were there before it
// left, the ones it was sharing with: a trainer that came after never shared with it, and
// one that left has most often ended (a trainer restarted at once had planned with half a
// worker from a probe, then re-planned twice in its first seconds as the share came back).
// One that was only switching plans is back within a moment, which a newcomer then sees as
// it sees any change of its share.
//
// Pure and clock-injected: callers pass the time; every decision is a table test
// (fair_share_test.cc). Not thread-safe: the worker service calls it under its lock.
#ifndef SLUICE_RPC_FAIR_SHARE_H_
#define SLUICE_RPC_FAIR_SHARE_H_

#include <cstdint>
#include <map>
#include <optional>

namespace sluice::rpc {

class FairShare {
 public:
  // `activity_window_ns`: how long after it was last served a client still counts as active.
  explicit FairShare(int64_t activity_window_ns) : window_ns_(activity_window_ns) {}

  // A client joins with `weight` (REQUIRES: weight > 0), in `group` (0: a group of its own),
  // at `now_ns`. Re-adding an id replaces its weight and group.
  void Add(uint64_t id, double weight, uint64_t group = 0, int64_t now_ns = 0);
  // The client leaves; it is never served again. An active one lingers in the shares (above).
  void Remove(uint64_t id, int64_t now_ns);

  // The client has one more task waiting for a thread.
  void Wait(uint64_t id, int64_t now_ns);
  // Takes the task to run next: the waiting client with the smallest virtual time (the
  // lower id on a tie). nullopt when no client waits.
  std::optional<uint64_t> Next(int64_t now_ns);
  // The task taken by Next used `cpu_ns` of CPU; the client is no longer being served.
  void Charge(uint64_t id, int64_t cpu_ns, int64_t now_ns);

  // CPUs of `budget` the client is entitled to now (its weight over the active parties'
  // weights; its own counted even if it is idle, in place of its party's). 0 for an unknown
  // or removed id.
  double Share(uint64_t id, double budget, int64_t now_ns) const;
  // The weights of the active parties, but for `exclude_group`'s (0: none left out), as
  // `exclude_group` sees them: a client that left counts only if it left after that group
  // joined (none for a group with no client here: a newcomer).
  double ActiveWeight(int64_t now_ns, uint64_t exclude_group = 0) const;

  int waiting(uint64_t id) const;

 private:
  struct Client {
    double weight = 1;
    uint64_t group = 0;
    double vtime = 0;       // charged CPU seconds / weight
    int waiting = 0;        // tasks waiting for a thread
    int serving = 0;        // tasks taken by Next and not yet charged
    int64_t last_ns = -1;   // when it was last served or charged (or left); -1: never
    int64_t added_ns = 0;   // when it joined
    bool removed = false;   // left, and lingers for its activity window
  };
  bool Active(const Client& c, int64_t now_ns) const;
  // The active parties' weights, leaving out client `skip_id` and group `skip_group` (0:
  // none), and the clients that left before `since_ns` (when the viewer joined).
  double PartyWeights(int64_t now_ns, uint64_t skip_id, uint64_t skip_group,
                      int64_t since_ns) const;
  // When `group` (> 0) joined: its earliest client's joining; nullopt with no client here.
  std::optional<int64_t> JoinedNs(uint64_t group) const;
  // Forgets the removed clients whose window has passed.
  void Prune(int64_t now_ns);

  int64_t window_ns_;
  std::map<uint64_t, Client> clients_;
  // The virtual time of the last task taken: where a client that was idle rejoins.
  double clock_ = 0;
};

}  // namespace sluice::rpc

#endif  // SLUICE_RPC_FAIR_SHARE_H_
