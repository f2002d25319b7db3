// The ranks' store as the ranks of one collective call (a vote, a save, a resume agreement) see
// it: keys under hydro/<round>/, bounded waits, and typed messages (group_message.h).
#pragma once

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "group_message.h"
#include "hydro/hang_watch.h"
#include "hydro/rank_store.h"

namespace hydro {

// The store as the ranks of one collective call see it: its keys live under <space>/<round>/.
class Link {
 public:
  // How long one request of gather() waits before it looks at what has come so far.
  static constexpr std::chrono::milliseconds kGatherSlice{1000};

  // `space`: the group's keys (CheckpointGroup's), apart from another group's on the same store.
  Link(RankStore& store, const std::string& space, int64_t round, std::chrono::milliseconds timeout)
      : store_(store), prefix_(space + "/" + std::to_string(round) + "/"), timeout_(timeout) {}

  RankStore& store() { return store_; }
  std::string key(const std::string& k) const { return prefix_ + k; }

  // The raw value of `k`, once some rank sets it; `what` says what did not happen otherwise.
  Status wait(const std::string& k, const std::string& what, std::string* value) {
    Status s = store_.get(key(k), timeout_, value);
    if (s.code() == Code::not_found) return expired(what);
    if (!s.ok()) return Status::io(what + ": " + s.message());
    return Status::OK();
  }

  // What every rank but `self` published under `k`<rank>, asked for in one request at a time:
  // (*texts)[r], nullopt for `self` and for any rank that had not published when the store timeout
  // passed; the first of those in *missing (-1: none). A peer's failure (or a malformed message)
  // ends the wait early: it decides the outcome, so nobody waits out the timeout for a hung rank.
  // `what` says what did not happen on another failure.
  Status gather(const std::string& k, int world, int self, const std::string& what,
                std::vector<std::optional<std::string>>* texts, int* missing) {
    std::vector<int> peers;
    std::vector<std::string> keys;
    for (int r = 0; r < world; ++r)
      if (r != self) {
        peers.push_back(r);
        keys.push_back(key(k + std::to_string(r)));
      }
    std::vector<std::optional<std::string>> got;
    RunningDeadline deadline(timeout_, kGatherSlice);  // a suspend mid-wait counts nothing
    for (;;) {
      auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline.left());
      Status s = store_.get_all(keys, std::clamp(left, std::chrono::milliseconds(0), kGatherSlice), &got);
      if (!s.ok() && s.code() != Code::not_found) return Status::io(what + ": " + s.message());
      if (s.ok() || any_failure(got) || deadline.passed()) break;
    }
    texts->assign(static_cast<size_t>(world), std::nullopt);
    *missing = -1;
    for (size_t i = 0; i < peers.size(); ++i) {
      if (!got[i] && *missing < 0) *missing = peers[i];
      (*texts)[static_cast<size_t>(peers[i])] = std::move(got[i]);
    }
    return Status::OK();
  }

  // A message among `texts` that reports a failure, or is no message at all.
  static bool any_failure(const std::vector<std::optional<std::string>>& texts) {
    for (const auto& t : texts) {
      Status peer;
      if (t && (!decode_message(*t, &peer, nullptr) || !peer.ok())) return true;
    }
    return false;
  }

  // What did not happen within the store timeout.
  Status expired(const std::string& what) const {
    return Status::io(what + " within " + std::to_string(timeout_.count() / 1000) +
                      " s (HYDRO_STORE_TIMEOUT): a rank died, hung or is paused too long");
  }

  // Tells the other ranks `s` and, when it is ok, `body`. Best effort: a rank that cannot publish
  // leaves its peers to their timeout.
  void publish(const std::string& k, const Status& s, const nlohmann::json& body = nullptr) {
    (void)store_.set(key(k), encode_message(s, body));
  }

  // What `from` published under `k`. Its failure comes back as Code::io after `what`; its
  // durability_uncertain comes back as that, with the body; a malformed message is corruption.
  Status receive(const std::string& k, const std::string& what, const std::string& from, nlohmann::json* body,
                 const std::string& missing = "did not report") {
    std::string text;
    HYDRO_RETURN_IF_ERROR(wait(k, what + from + " " + missing, &text));
    return read(text, what, from, body);
  }

  // A message `from` sent, as receive() reads it.
  static Status read(const std::string& text, const std::string& what, const std::string& from, nlohmann::json* body) {
    Status peer;
    if (!decode_message(text, &peer, body)) return Status::corruption(what + from + " sent a malformed message");
    if (peer.ok() || peer.code() == Code::durability_uncertain) return peer;
    // A failure that already says what did not happen (the committer's outcome) goes on as it is.
    if (peer.message().compare(0, what.size(), what) == 0) return Status::io(peer.message());
    return Status::io(what + from + " failed: " + peer.message());
  }

 private:
  RankStore& store_;
  std::string prefix_;
  std::chrono::milliseconds timeout_;
};

}  // namespace hydro
