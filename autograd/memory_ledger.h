// MemoryLedger: an observer that accounts every byte of one rank by category, live and peak, and
// the saved activations by the op that saved them. Saved bytes are counted once per unique
// Storage (two ops saving the same tensor count it once, under the first), never for parameters,
// and LayerNorm statistics and other SaveRole::extra tensors go to a separate extras total (the
// rules: autograd/live_bytes.h, which the trace recorder's memory counters follow too).
// One ledger may watch the contexts of several ranks (their totals add up); two contexts of the
// same rank need two ledgers. It is thread-safe.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "autograd/hash_index.h"
#include "autograd/hook_lock.h"
#include "autograd/live_bytes.h"
#include "autograd/observer.h"

namespace shardscope {

class MemoryLedger final : public Observer {
 public:
  // Saved bytes grouped by the op that first saved them.
  struct SavedSite {
    std::string scope;  // "attn.qkv"
    std::string op;     // "matmul"
    int layer = -1;
    SaveRole role = SaveRole::activation;
    std::size_t bytes = 0;
  };
  // Bytes allocated by one op (its scope and kind), over the ledger's lifetime.
  struct OpAllocations {
    std::string scope;
    std::string op;
    std::size_t bytes = 0;
    std::size_t count = 0;
  };

  std::size_t live(MemoryCategory category) const;
  // Every category's live bytes at once (one lock: an observer that reads them after each event).
  std::array<std::size_t, kMemoryCategoryCount> live_all() const;
  std::size_t peak(MemoryCategory category) const;
  std::size_t live_total() const;
  std::size_t peak_total() const;
  // Peaks restart from the live values (for a per-step peak).
  void reset_peaks();

  // Bytes saved for backward and not yet released, optionally of one layer only.
  std::size_t saved_activation_bytes(std::optional<int> layer = std::nullopt) const;
  std::size_t extras_bytes(std::optional<int> layer = std::nullopt) const;
  // The saved bytes by saving op, in the order the ops first saved.
  std::vector<SavedSite> saved_by_site(std::optional<int> layer = std::nullopt) const;
  std::vector<OpAllocations> allocations_by_op() const;
  // Frees or releases of more bytes than were live (a bug in the events): 0 in a correct run.
  std::size_t accounting_errors() const;

  void on_alloc(const StorageEvent& e) override;
  void on_free(const StorageEvent& e) override;
  void on_recategorize(const StorageEvent& e) override;
  void on_save(const SaveEvent& e) override;
  void on_release(const SaveEvent& e) override;

 private:
  struct SiteKey {
    std::string scope, op;
    int layer;
    SaveRole role;
  };

  std::uint32_t site_index(const SaveEvent& e);
  std::size_t saved_bytes(SaveRole role, std::optional<int> layer) const;

  mutable HookLock hook_lock_;
  LiveBytes bytes_;  // entries' `site`: index into site_keys_ of the first saver
  std::vector<SiteKey> site_keys_;
  HashIndex site_index_;  // site_keys_ by their fields
  std::vector<OpAllocations> op_allocations_;
  HashIndex op_index_;  // op_allocations_ by scope and op
  // on_alloc's look-up of op_index_ starts at the last op's entry (an op allocates its outputs
  // one after another).
  std::size_t last_op_ = 0;
};

}  // namespace shardscope
