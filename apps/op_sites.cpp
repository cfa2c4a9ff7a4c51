// The dry run that lists a layer's ops, and the nearest names for a breakpoint that matches none.
#include "apps/op_sites.h"

#include <algorithm>
#include <mutex>
#include <vector>

#include "apps/edit_distance.h"
#include "parallel/comm/spmd.h"

namespace shardscope {
namespace {

class SiteCollector final : public Observer {
 public:
  void on_op_begin(const OpEvent& e) override { add(e.site); }
  void on_collective_begin(const CollectiveEvent& e) override { add(e.site); }
  std::set<OpSite> take() {
    std::lock_guard<std::mutex> lock(mutex_);
    return std::move(sites_);
  }

 private:
  void add(const Site& s) {
    std::lock_guard<std::mutex> lock(mutex_);
    sites_.insert({std::string(s.op), std::string(s.scope), s.phase, s.layer});
  }
  std::mutex mutex_;
  std::set<OpSite> sites_;
};

Site as_site(const OpSite& s) {
  Site site;
  site.op = s.op;
  site.scope = s.scope;
  site.phase = s.phase;
  site.layer = s.layer;
  return site;
}

// The names a breakpoint's op can take (op kinds, "scope/op", "scope/"), the closest to `given`
// first, at most `count`.
std::vector<std::string> nearest_names(const std::string& given, const std::set<OpSite>& sites,
                                       std::size_t count) {
  std::set<std::string> names;
  for (const OpSite& s : sites) {
    names.insert(s.op);
    names.insert(s.scope + "/" + s.op);
    if (!s.scope.empty()) names.insert(s.scope + "/");
  }
  std::vector<std::pair<std::size_t, std::string>> ranked;
  for (const std::string& n : names) ranked.emplace_back(edit_distance(given, n), n);
  std::sort(ranked.begin(), ranked.end());
  std::vector<std::string> out;
  for (std::size_t i = 0; i < ranked.size() && i < count; ++i) out.push_back(ranked[i].second);
  return out;
}

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

}  // namespace

std::set<OpSite> collect_op_sites(LayerRunSpec spec) {
  spec.steps = 1;
  spec.dump = nullptr;
  spec.load = nullptr;
  spec.on_step = nullptr;
  spec.reference = nullptr;
  SiteCollector collector;
  run_spmd(spec.layer.degree, SpmdOptions(), [&](RankEnv& env) {
    ObserverGuard attach(env.ctx, collector);
    run_layer_rank(env, spec);
  });
  return collector.take();
}

std::string unmatched_breakpoint(const Breakpoint& breakpoint, const std::set<OpSite>& sites) {
  if (std::any_of(sites.begin(), sites.end(),
                  [&](const OpSite& s) { return breakpoint.matches(as_site(s)); })) {
    return "";
  }
  if (breakpoint.layer) {
    std::set<int> layers;
    for (const OpSite& s : sites) layers.insert(s.layer);
    std::vector<std::string> names;
    for (int l : layers) names.push_back(l < 0 ? "-1 (outside any layer)" : std::to_string(l));
    return "no op of this run is in layer " + std::to_string(*breakpoint.layer) +
           "; its ops are in layer " + joined(names);
  }
  return "no op '" + breakpoint.op +
         "' runs in this layer; nearest: " + joined(nearest_names(breakpoint.op, sites, 5));
}

}  // namespace shardscope
