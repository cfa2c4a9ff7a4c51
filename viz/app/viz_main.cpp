// shardscope-viz's command line and frame loop.
#include "viz/app/viz_main.h"

#include <imgui.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>

#include <nlohmann/json.hpp>

#include "apps/run_flags.h"
#include "autograd/errors.h"
#include "viz/app/panels.h"
#include "viz/app/window.h"
#include "viz/model/synthetic.h"

namespace shardscope::viz {
namespace {

struct VizFlags {
  RunFlags run;
  std::string trace;       // replay this trace instead of running live
  std::string synthetic;   // "RANKS,EVENTS": replay a generated trace (the benchmark)
  std::string script;      // commands run before the first frame
  std::string screenshot;  // write the last frame here (PNG)
  std::string panels;      // write the panel rectangles here (JSON)
  bool headless = false;
  int width = 1600, height = 1000;
  int frames = 3;        // headless: frames drawn before the screenshot (layout settles)
  int bench_frames = 0;  // > 0: draw this many frames and print their times
  bool bench_rebuild = false;
  int script_limit_s = 600;
};

std::unique_ptr<Source> make_source(const VizFlags& f, const CLI::App& app) {
  if (!f.trace.empty() && !f.synthetic.empty()) {
    throw ArgumentError("--trace and --synthetic both replay a trace: give one");
  }
  if (!f.trace.empty() || !f.synthetic.empty()) {
    for (const CLI::Option* o : app.get_options()) {
      if (o->count() > 0 && RunFlags::is_run_flag(o->get_name())) {
        throw ArgumentError(o->get_name() + " configures a live run, but " +
                            (f.trace.empty() ? "--synthetic" : "--trace") +
                            " replays a recorded one: its configuration comes from the trace");
      }
    }
  }
  if (app.count("--timeout-ms") > 0) {
    throw ArgumentError(
        "--timeout-ms does not apply to shardscope-viz: a live session waits for "
        "paused ranks without a timeout");
  }
  if (!f.trace.empty()) return make_replay_source(f.trace);
  if (!f.synthetic.empty()) {
    const std::size_t comma = f.synthetic.find(',');
    int ranks = 0;
    long long events = 0;
    try {
      ranks = std::stoi(f.synthetic.substr(0, comma));
      events = comma == std::string::npos ? 0 : std::stoll(f.synthetic.substr(comma + 1));
    } catch (const std::exception&) {
    }
    if (ranks < 1 || ranks > 64 || events < 1) {
      throw ArgumentError(
          "--synthetic takes RANKS,EVENTS with 1 <= RANKS <= 64 and EVENTS >= 1, given '" +
          f.synthetic + "'");
    }
    return make_replay_source(synthetic_trace(ranks, static_cast<std::size_t>(events), 1));
  }
  return make_live_source(f.run.resolve(false));
}

void write_panels(const VizUi& ui, const std::string& path, int width, int height) {
  nlohmann::json j = {{"width", width}, {"height", height}, {"panels", nlohmann::json::array()}};
  for (const PanelRegion& p : ui.regions()) {
    j["panels"].push_back({{"name", p.name},
                           {"x0", p.rect.x0},
                           {"y0", p.rect.y0},
                           {"x1", p.rect.x1},
                           {"y1", p.rect.y1}});
  }
  std::ofstream out(path);
  out << j.dump(2) << "\n";
  if (!out) {
    throw Error("--panels: cannot write " + path + " (" + std::strerror(errno) + ")");
  }
}

nlohmann::json stats(std::vector<double> ms) {
  std::sort(ms.begin(), ms.end());
  double sum = 0;
  for (double x : ms) sum += x;
  return {{"mean", sum / static_cast<double>(ms.size())},
          {"median", ms[ms.size() / 2]},
          {"p95", ms[ms.size() * 95 / 100]}};
}

// Draws `frames` frames and prints their times in ms: "ui" is the panels' work on the CPU (view
// model, when its inputs changed, and ImGui's draw lists), "frame" adds rendering and waiting
// for it (the capture's glFinish and read-back). The first frame builds every view; `rebuild`
// makes every frame do so, as a frame of a running live session does.
void bench(Window& window, VizUi& ui, int frames, bool rebuild, std::ostream& out) {
  std::vector<double> ui_ms, frame_ms;
  Image image;
  using Clock = std::chrono::steady_clock;
  for (int i = 0; i < frames; ++i) {
    if (rebuild) ui.invalidate();
    const auto start = Clock::now();
    window.begin_frame();
    ui.frame(static_cast<float>(window.width()), static_cast<float>(window.height()));
    const auto drawn = Clock::now();
    window.end_frame(&image);
    ui_ms.push_back(std::chrono::duration<double, std::milli>(drawn - start).count());
    frame_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
  }
  const nlohmann::json j = {{"frames", frames},
                            {"rebuild_views_every_frame", rebuild},
                            {"events", ui.snapshot().events.size()},
                            {"ranks", ui.snapshot().ranks},
                            {"width", window.width()},
                            {"height", window.height()},
                            {"ui_ms", stats(ui_ms)},
                            {"frame_ms", stats(frame_ms)}};
  out << j.dump() << "\n";
}

}  // namespace

int viz_main(int argc, const char* const* argv, std::ostream& out, std::ostream& err) {
  CLI::App app{
      "shardscope-viz: step a tensor-parallel Transformer layer and watch shards, collectives "
      "and activation memory. Live (the flags of `shardscope run`) or a recorded trace (--trace)."};
  VizFlags f;
  f.run.add_to(app, /*outputs=*/false);
  app.add_option("--trace", f.trace,
                 "replay this trace (shardscope run --trace) instead of a live run");
  app.add_option("--synthetic", f.synthetic,
                 "replay a generated trace of RANKS,EVENTS (benchmarks)");
  app.add_option("--script", f.script,
                 "commands before the first frame: \"step 40; next-collective; step-layer; "
                 "continue; break phase backward; show-layer 1\"");
  app.add_flag("--headless", f.headless,
               "draw without showing a window (needs --screenshot or "
               "--bench-frames; still needs a display, e.g. xvfb-run)");
  app.add_option("--screenshot", f.screenshot, "write the last frame to this PNG file");
  app.add_option("--panels", f.panels, "write where each panel was drawn to this JSON file");
  app.add_option("--width", f.width, "window width in pixels")->capture_default_str();
  app.add_option("--height", f.height, "window height in pixels")->capture_default_str();
  app.add_option("--frames", f.frames, "headless: frames drawn before the screenshot")
      ->capture_default_str();
  app.add_option("--bench-frames", f.bench_frames, "draw this many frames and print frame times");
  app.add_flag("--bench-rebuild", f.bench_rebuild,
               "with --bench-frames: rebuild every view every frame (a running live session)");
  app.add_option("--script-limit-s", f.script_limit_s, "how long one script command may run")
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e, out, err);
    err << "shardscope-viz: " << e.what() << " (see shardscope-viz --help)\n";
    return 2;
  }
  std::unique_ptr<Source> source;
  try {
    if (f.width < 320 || f.height < 240 || f.width > 8192 || f.height > 8192) {
      throw ArgumentError("--width and --height must be 320..8192 and 240..8192, given " +
                          std::to_string(f.width) + "x" + std::to_string(f.height));
    }
    if (f.frames < 1)
      throw ArgumentError("--frames must be at least 1, given " + std::to_string(f.frames));
    if (f.bench_frames < 0) {
      throw ArgumentError("--bench-frames must be >= 0, given " + std::to_string(f.bench_frames));
    }
    if (f.script_limit_s < 1) {
      throw ArgumentError("--script-limit-s must be at least 1, given " +
                          std::to_string(f.script_limit_s));
    }
    if (f.headless && f.screenshot.empty() && f.bench_frames == 0) {
      throw ArgumentError(
          "--headless draws no window: give --screenshot FILE.png or --bench-frames N");
    }
    source = make_source(f, app);
  } catch (const ArgumentError& e) {
    err << "shardscope-viz: " << with_flags(e) << "\n";
    return 2;
  } catch (const std::exception& e) {
    err << "shardscope-viz: " << e.what() << "\n";
    return 1;
  }
  LayerSelection layer;  // what the script's show-layer picks, for the panels
  try {
    if (!f.script.empty()) {
      run_script(*source, f.script, std::chrono::seconds(f.script_limit_s), &layer);
    }
  } catch (const ArgumentError& e) {
    err << "shardscope-viz: --script: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    err << "shardscope-viz: --script: " << e.what() << "\n";
    return 1;
  }
  try {
    Window window("shardscope-viz", f.width, f.height, f.headless);
    VizUi ui(*source);
    ui.state().layer = layer;
    if (f.bench_frames > 0) {
      bench(window, ui, f.bench_frames, f.bench_rebuild, out);
    } else if (f.headless) {
      Image image;
      for (int i = 0; i < f.frames; ++i) {
        window.begin_frame();
        ui.frame(static_cast<float>(window.width()), static_cast<float>(window.height()));
        window.end_frame(i + 1 == f.frames ? &image : nullptr);
      }
      write_png(image, f.screenshot);
      out << "shardscope-viz: wrote " << f.screenshot << " (" << image.width << "x" << image.height
          << ")\n";
    } else {
      while (!window.should_close()) {
        window.begin_frame();
        ui.frame(static_cast<float>(window.width()), static_cast<float>(window.height()));
        window.end_frame();
      }
    }
    if (!f.panels.empty()) write_panels(ui, f.panels, window.width(), window.height());
    if (!ui.snapshot().error.empty()) {
      err << "shardscope-viz: the run failed: " << ui.snapshot().error << "\n";
      return 1;
    }
  } catch (const std::exception& e) {
    err << "shardscope-viz: " << e.what() << "\n";
    return 1;
  }
  return 0;
}

}  // namespace shardscope::viz
