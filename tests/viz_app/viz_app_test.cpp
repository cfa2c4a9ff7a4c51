// shardscope-viz as a person runs it: headless frames of a live run and of a replayed trace,
// written as PNG and read back. The checks look at pixels: the image has the size asked for,
// every panel has drawn content, and the shard panel shows every rank's colour.
#include <gtest/gtest.h>
#include <imgui.h>
#include <stb_image.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "apps/run.h"
#include "viz/app/panels.h"
#include "viz/app/viz_main.h"
#include "viz/app/window.h"
#include "viz/model/synthetic.h"
#include "viz/model/theme.h"

namespace shardscope::viz {
namespace {

struct Png {
  int width = 0, height = 0;
  std::vector<std::uint8_t> rgba;
  const std::uint8_t* at(int x, int y) const {
    return rgba.data() + (static_cast<std::size_t>(y) * static_cast<std::size_t>(width) +
                          static_cast<std::size_t>(x)) *
                             4;
  }
};

Png read_png(const std::string& path) {
  Png p;
  int channels = 0;
  unsigned char* data = stbi_load(path.c_str(), &p.width, &p.height, &channels, 4);
  if (!data) return p;
  p.rgba.assign(data, data + static_cast<std::size_t>(p.width) * p.height * 4);
  stbi_image_free(data);
  return p;
}

struct Region {
  int x0, y0, x1, y1;
};

std::map<std::string, Region> read_panels(const std::string& path) {
  std::ifstream in(path);
  const nlohmann::json j = nlohmann::json::parse(in);
  std::map<std::string, Region> out;
  for (const auto& p : j.at("panels")) {
    out[p.at("name").get<std::string>()] = {
        static_cast<int>(p.at("x0").get<double>()), static_cast<int>(p.at("y0").get<double>()),
        static_cast<int>(p.at("x1").get<double>()), static_cast<int>(p.at("y1").get<double>())};
  }
  return out;
}

bool near(const std::uint8_t* px, Color c, int tolerance) {
  return std::abs(px[0] - red_of(c)) <= tolerance && std::abs(px[1] - green_of(c)) <= tolerance &&
         std::abs(px[2] - blue_of(c)) <= tolerance;
}

// Pixels of `region` within `tolerance` of colour c.
int count_color(const Png& png, const Region& r, Color c, int tolerance = 6) {
  int n = 0;
  for (int y = r.y0; y < r.y1 && y < png.height; ++y) {
    for (int x = r.x0; x < r.x1 && x < png.width; ++x) n += near(png.at(x, y), c, tolerance);
  }
  return n;
}

// Pixels inside a panel (below its title bar, inside its border) that differ from its most
// common colour (its background): what the panel drew, text included. An empty panel has none.
int content_pixels(const Png& png, const Region& panel) {
  const Region r{panel.x0 + 3, panel.y0 + 24, panel.x1 - 3, panel.y1 - 3};
  std::map<std::uint32_t, int> histogram;
  auto key = [](const std::uint8_t* px) {
    return static_cast<std::uint32_t>(px[0]) << 16 | static_cast<std::uint32_t>(px[1]) << 8 | px[2];
  };
  for (int y = r.y0; y < r.y1 && y < png.height; ++y) {
    for (int x = r.x0; x < r.x1 && x < png.width; ++x) ++histogram[key(png.at(x, y))];
  }
  int most = 0, total = 0;
  for (const auto& entry : histogram) {
    most = std::max(most, entry.second);
    total += entry.second;
  }
  return total - most;
}

int area(const Region& r) {
  return (r.x1 - r.x0) * (r.y1 - r.y0);
}

struct VizRun {
  int code = -1;
  std::string out, err;
  Png png;
  std::map<std::string, Region> panels;
};

std::string temp_name(const std::string& what) {
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  return ::testing::TempDir() + "viz_" + info->name() + "_" + what;
}

VizRun run_viz(std::vector<std::string> args, int width = 1280, int height = 800) {
  VizRun r;
  const std::string png = temp_name("shot.png"), panels = temp_name("panels.json");
  args.insert(args.begin(), "shardscope-viz");
  for (const std::string& a :
       {std::string("--headless"), std::string("--screenshot"), png, std::string("--panels"),
        panels, std::string("--width"), std::to_string(width), std::string("--height"),
        std::to_string(height)}) {
    args.push_back(a);
  }
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  std::ostringstream out, err;
  r.code = viz_main(static_cast<int>(argv.size()), argv.data(), out, err);
  r.out = out.str();
  r.err = err.str();
  if (r.code == 0) {
    r.png = read_png(png);
    r.panels = read_panels(panels);
  }
  std::remove(png.c_str());
  std::remove(panels.c_str());
  return r;
}

// Fails (never skips) without a display: these tests are how CI knows the window works.
void require_display() {
  ASSERT_NE(std::getenv("DISPLAY"), nullptr)
      << "no X display: install Debian's xvfb (scripts/setup.sh does) so ctest runs these "
         "tests under xvfb-run, or run them on a desktop";
}

const std::vector<std::string> kPanels = {"Controls",    "Shard layout", "Tensor inspector",
                                          "Collectives", "Memory",       "Check"};

void expect_every_panel_drawn(const VizRun& r) {
  for (const std::string& name : kPanels) {
    ASSERT_TRUE(r.panels.count(name)) << name;
    // One line of text is some hundreds of pixels.
    EXPECT_GT(content_pixels(r.png, r.panels.at(name)), 300) << name << " looks empty";
  }
}

TEST(VizApp, LiveTpSpForwardAtTheAllGatherBeforeQkv) {
  require_display();
  const VizRun r = run_viz({"--mode", "tp-sp", "--degree", "4", "--script", "next-collective"});
  ASSERT_EQ(r.code, 0) << r.err;
  ASSERT_EQ(r.png.width, 1280);
  ASSERT_EQ(r.png.height, 800);
  expect_every_panel_drawn(r);
  const Region shard = r.panels.at("Shard layout");
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_GT(count_color(r.png, shard, theme::rank_color(rank)), 200)
        << "rank " << rank << "'s colour is missing from the shard panel";
  }
  // No fifth rank: its colour appears nowhere in the shard panel.
  EXPECT_LT(count_color(r.png, shard, theme::rank_color(4)), 20);
}

TEST(VizApp, LiveTpSpBackwardShowsCollectivesAndTheFullSavedTable) {
  require_display();
  const VizRun r = run_viz({"--mode", "tp-sp", "--degree", "4", "--script",
                            "break phase backward; continue; clear; next-collective"});
  ASSERT_EQ(r.code, 0) << r.err;
  expect_every_panel_drawn(r);
  const Region lanes = r.panels.at("Collectives");
  // The forward's all-gathers and reduce-scatters are boxes in their kinds' colours.
  EXPECT_GT(count_color(r.png, lanes, theme::collective_color(CollectiveKind::all_gather)), 50);
  EXPECT_GT(count_color(r.png, lanes, theme::collective_color(CollectiveKind::reduce_scatter)), 20);
  // Saved activations are on the memory charts.
  EXPECT_GT(count_color(r.png, r.panels.at("Memory"),
                        theme::memory_color(MemoryCategory::saved_activation)),
            200);
}

TEST(VizApp, ReplaysARecordedTrace) {
  require_display();
  RunOptions o;
  o.spec.layer.mode = ParallelMode::ulysses;
  o.spec.layer.degree = 2;
  o.spec.steps = 1;
  o.trace_path = temp_name("trace.json");
  std::ostringstream log;
  run_layer(o, log);
  const VizRun r = run_viz({"--trace", o.trace_path, "--script", "next-collective; step 3"});
  std::remove(o.trace_path.c_str());
  ASSERT_EQ(r.code, 0) << r.err;
  expect_every_panel_drawn(r);
  const Region shard = r.panels.at("Shard layout");
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_GT(count_color(r.png, shard, theme::rank_color(rank)), 100) << "rank " << rank;
  }
}

// Pixels that differ between two screenshots of the same size inside `r`.
int differing_pixels(const Png& a, const Png& b, const Region& r) {
  int n = 0;
  for (int y = r.y0; y < r.y1 && y < a.height; ++y) {
    for (int x = r.x0; x < r.x1 && x < a.width; ++x) {
      n += !std::equal(a.at(x, y), a.at(x, y) + 3, b.at(x, y));
    }
  }
  return n;
}

// `shardscope-viz --layers 3 --mode tp-sp --degree 2`: a live stack steps into its second layer
// and every panel draws. The memory panel's table (its right half: no clock in it) shows the
// layer the rank is in, layer 1, unless the script picked another.
TEST(VizApp, ALiveStackDrawsEveryPanelAndTheScriptPicksTheLayer) {
  require_display();
  auto run = [](const std::string& pick) {
    return run_viz({"--mode", "tp-sp", "--degree", "2", "--layers", "3", "--script",
                    "step-layer; next-collective" + pick});
  };
  const VizRun r = run("");
  ASSERT_EQ(r.code, 0) << r.err;
  expect_every_panel_drawn(r);
  const Region shard = r.panels.at("Shard layout");
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_GT(count_color(r.png, shard, theme::rank_color(rank)), 100) << "rank " << rank;
  }
  const VizRun one = run("; show-layer 1"), two = run("; show-layer 2");
  ASSERT_EQ(one.code, 0) << one.err;
  ASSERT_EQ(two.code, 0) << two.err;
  Region table = r.panels.at("Memory");
  table.x0 = (table.x0 + table.x1) / 2;
  EXPECT_EQ(differing_pixels(r.png, one.png, table), 0) << "layer 1 is the one followed";
  EXPECT_GT(differing_pixels(r.png, two.png, table), 200) << "show-layer 2 showed layer 1";
}

TEST(VizApp, AShowLayerOutsideTheStackIsExitCodeTwo) {
  std::ostringstream out, err;
  const char* argv[] = {"shardscope-viz", "--mode",       "tp",         "--degree",     "2",
                        "--script",       "show-layer 1", "--headless", "--screenshot", "x.png"};
  EXPECT_EQ(viz_main(10, argv, out, err), 2);
  EXPECT_NE(err.str().find("0 to 0 (a stack of 1 layer), given '1'"), std::string::npos)
      << err.str();
}

// The layer selector in the window: it follows the focused rank's layer as 'l' steps the replay
// of a stack from layer to layer; a picked layer stays, and the shard and memory panels draw it.
TEST(VizApp, TheLayerSelectorFollowsTheStepsUntilALayerIsPicked) {
  require_display();
  RunOptions o;
  o.spec.layer.mode = ParallelMode::tp_sp;
  o.spec.layer.degree = 2;
  o.spec.layer.layers = 3;
  o.spec.steps = 1;
  o.trace_path = temp_name("trace.json");
  std::ostringstream log;
  run_layer(o, log);
  const std::unique_ptr<Source> source = make_replay_source(o.trace_path);
  std::remove(o.trace_path.c_str());
  Window window("layers", 1280, 800, true);
  VizUi ui(*source);
  Image image;
  auto frame = [&](int key) {
    ImGuiIO& io = ImGui::GetIO();
    if (key) io.KeysDown[key] = true;
    window.begin_frame();
    ui.frame(1280, 800);
    window.end_frame(&image);
    if (key) io.KeysDown[key] = false;
  };
  // Follows: 's' steps every rank one op, 'l' to its first op of another layer or phase.
  std::vector<int> followed;
  auto step_and_follow = [&]() {
    frame('L');
    frame(0);
    const RankStatus& st = ui.snapshot().status[0];
    if (st.layer < 0) return;
    EXPECT_EQ(ui.state().layer.layer, st.layer) << st.where;
    if (followed.empty() || followed.back() != st.layer) followed.push_back(st.layer);
  };
  frame(0);
  frame('S');  // the first op: layer 0's
  frame(0);
  ASSERT_EQ(ui.snapshot().status[0].layer, 0) << ui.snapshot().status[0].where;
  EXPECT_EQ(ui.state().layer.layer, 0);
  followed.push_back(0);
  while (followed.size() < 2 && !ui.snapshot().finished) step_and_follow();
  ASSERT_EQ(followed, (std::vector<int>{0, 1})) << "the forward's first two layers";
  // Picked: layer 0 (saved) and layer 2 (nothing yet) draw differently, and a step keeps it.
  auto panel_pixels_differ = [&](const Image& a, const Image& b, const std::string& name) {
    for (const PanelRegion& p : ui.regions()) {
      if (p.name != name) continue;
      std::size_t differ = 0;
      for (int y = static_cast<int>(p.rect.y0); y < static_cast<int>(p.rect.y1); ++y) {
        for (int x = static_cast<int>(p.rect.x0); x < static_cast<int>(p.rect.x1); ++x) {
          const std::size_t i =
              (static_cast<std::size_t>(y) * 1280 + static_cast<std::size_t>(x)) * 4;
          differ += a.rgba[i] != b.rgba[i] || a.rgba[i + 1] != b.rgba[i + 1];
        }
      }
      return differ;
    }
    return std::size_t{0};
  };
  ui.state().layer = {false, 0};
  frame(0);
  frame(0);
  const Image layer0 = image;
  ui.state().layer = {false, 2};
  frame(0);
  frame(0);
  EXPECT_EQ(ui.state().layer.layer, 2);
  // Only the layer's number differs there: its note, "layer 2 of 3: parameters layers.2.*".
  EXPECT_GT(panel_pixels_differ(image, layer0, "Shard layout"), 20u) << "layers 0 and 2 alike";
  EXPECT_GT(panel_pixels_differ(image, layer0, "Memory"), 50u) << "layers 0 and 2 alike";
  // The collectives' table of the layer: layer 0's forward calls all made, layer 2's none yet.
  EXPECT_GT(panel_pixels_differ(image, layer0, "Collectives"), 50u) << "layers 0 and 2 alike";
  frame('L');
  frame(0);
  EXPECT_EQ(ui.state().layer.layer, 2) << "a picked layer stays as the ranks step";
  EXPECT_EQ(ui.snapshot().status[0].layer, 2) << ui.snapshot().status[0].where;
  // Following again, through the rest of the run.
  ui.state().layer.follow = true;
  for (int i = 0; i < 12 && !ui.snapshot().finished; ++i) step_and_follow();
  EXPECT_EQ(followed.front(), 0);
  EXPECT_NE(std::find(followed.begin(), followed.end(), 2), followed.end()) << "never layer 2";
  EXPECT_GE(followed.size(), 4u) << "the backward's layers were not followed";
}

TEST(VizApp, LargeSyntheticTraceStillDraws) {
  require_display();
  const VizRun r = run_viz({"--synthetic", "8,100000", "--script", "continue"});
  ASSERT_EQ(r.code, 0) << r.err;
  expect_every_panel_drawn(r);
  // 100k events on 8 lanes fold into boxes that cover much of the timeline.
  const Region lanes = r.panels.at("Collectives");
  EXPECT_GT(content_pixels(r.png, lanes), area(lanes) / 5);
}

TEST(VizApp, BadFlagsAreExitCodeTwoAndNameTheRule) {
  std::ostringstream out, err;
  const char* headless_only[] = {"shardscope-viz", "--headless"};
  EXPECT_EQ(viz_main(2, headless_only, out, err), 2);
  EXPECT_NE(err.str().find("--screenshot"), std::string::npos) << err.str();

  std::ostringstream err2;
  const char* bad_script[] = {"shardscope-viz", "--mode", "tp", "--degree", "2",
                              "--script",       "jump"};
  EXPECT_EQ(viz_main(7, bad_script, out, err2), 2);
  EXPECT_NE(err2.str().find("unknown script command 'jump'"), std::string::npos) << err2.str();

  std::ostringstream err3;
  const char* bad_mode[] = {"shardscope-viz", "--mode",       "pipeline",
                            "--headless",     "--screenshot", "x.png"};
  EXPECT_EQ(viz_main(6, bad_mode, out, err3), 2);
  EXPECT_NE(err3.str().find("pipeline"), std::string::npos) << err3.str();
}

TEST(VizApp, LiveRunFlagsWithAReplayAreRefused) {
  std::ostringstream out, err;
  const char* argv[] = {"shardscope-viz", "--trace",      "t.json", "--mode", "tp",
                        "--headless",     "--screenshot", "x.png"};
  EXPECT_EQ(viz_main(8, argv, out, err), 2);
  EXPECT_NE(err.str().find("--mode configures a live run"), std::string::npos) << err.str();
  std::ostringstream err2;
  const char* timeout[] = {"shardscope-viz", "--timeout-ms", "50",
                           "--headless",     "--screenshot", "x.png"};
  EXPECT_EQ(viz_main(6, timeout, out, err2), 2);
  EXPECT_NE(err2.str().find("--timeout-ms"), std::string::npos) << err2.str();
  std::ostringstream err3;
  const char* limit[] = {"shardscope-viz", "--script-limit-s", "0",
                         "--headless",     "--screenshot",     "x.png"};
  EXPECT_EQ(viz_main(6, limit, out, err3), 2);
  EXPECT_NE(err3.str().find("--script-limit-s must be at least 1, given 0"), std::string::npos)
      << err3.str();
}

TEST(VizApp, AMissingTraceIsExitCodeOneNamingTheFile) {
  std::ostringstream out, err;
  const char* argv[] = {"shardscope-viz", "--trace",      "/nonexistent/trace.json",
                        "--headless",     "--screenshot", "x.png"};
  EXPECT_EQ(viz_main(6, argv, out, err), 1);
  EXPECT_NE(err.str().find("/nonexistent/trace.json"), std::string::npos) << err.str();
}

// Issue 19: "shardscope-viz: shardscope-viz: cannot open a display": the window's error carried
// the program's name and main added it again. Every error line names the program once.
TEST(VizApp, NoDisplayIsExitCodeOneNamingTheProgramOnce) {
  const char* display = std::getenv("DISPLAY");
  const std::string saved = display ? display : "";
  unsetenv("DISPLAY");
  std::ostringstream out, err;
  const char* argv[] = {"shardscope-viz", "--synthetic",  "2,100",
                        "--headless",     "--screenshot", "x.png"};
  const int code = viz_main(6, argv, out, err);
  if (display) setenv("DISPLAY", saved.c_str(), 1);
  EXPECT_EQ(code, 1);
  EXPECT_NE(err.str().find("shardscope-viz: cannot open a display"), std::string::npos)
      << err.str();
  EXPECT_EQ(err.str().find("shardscope-viz: shardscope-viz"), std::string::npos) << err.str();
}

// Issue 19: keyboard shortcuts. A key press (io.KeysDown by GLFW key code, as the backend sets
// it) runs the same command as its button, and 'h' shows and hides the keys' overlay.
TEST(VizApp, KeysStepTheRunAndHShowsTheKeys) {
  const std::unique_ptr<Source> source = make_replay_source(synthetic_trace(2, 2000, 1));
  Window window("keys", 800, 600, true);
  VizUi ui(*source);
  Image image;
  auto frame = [&](int key) {
    ImGuiIO& io = ImGui::GetIO();
    if (key) io.KeysDown[key] = true;  // GLFW_KEY_S is 'S'
    window.begin_frame();
    ui.frame(800, 600);
    window.end_frame(&image);
    if (key) io.KeysDown[key] = false;
  };
  frame(0);
  frame(0);
  const std::size_t before = ui.snapshot().events.size();
  const Image plain = image;
  frame('S');
  frame(0);
  EXPECT_GT(ui.snapshot().events.size(), before) << "'s' did not step";
  const std::size_t stepped = ui.snapshot().events.size();
  frame('X');  // no command
  frame(0);
  EXPECT_EQ(ui.snapshot().events.size(), stepped);
  EXPECT_FALSE(ui.state().help);
  frame('H');
  EXPECT_TRUE(ui.state().help);
  frame(0);
  // The overlay sits in the middle of the window, over the panels.
  std::size_t differ = 0;
  for (int y = 260; y < 340; ++y) {
    for (int x = 300; x < 500; ++x) {
      const std::size_t i = (static_cast<std::size_t>(y) * 800 + static_cast<std::size_t>(x)) * 4;
      differ += image.rgba[i] != plain.rgba[i] || image.rgba[i + 1] != plain.rgba[i + 1];
    }
  }
  EXPECT_GT(differ, 2000u) << "no overlay drawn";
  frame('H');
  EXPECT_FALSE(ui.state().help);
}

}  // namespace
}  // namespace shardscope::viz
