// The panels: ImGui calls only. Every shape comes from the view model; this file picks the
// panel rectangles, turns view-model coordinates into screen coordinates and handles input.
//
// Index: layout | Keys and the help overlay | Controls (and the layer selector) | Shard layout |
//        Tensor inspector | Collectives | Memory | Check
#include "viz/app/panels.h"

#define GLFW_INCLUDE_NONE
#include <GLFW/glfw3.h>
#include <imgui.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>

#include "autograd/errors.h"
#include "viz/app/draw.h"
#include "viz/model/controls.h"

namespace shardscope::viz {

// ---- layout ------------------------------------------------------------------------------------

bool VizUi::begin_panel(const char* name, const Rect& r) {
  regions_.push_back({name, r});
  ImGui::SetNextWindowPos(ImVec2(r.x0, r.y0), ImGuiCond_Always);
  ImGui::SetNextWindowSize(ImVec2(r.width(), r.height()), ImGuiCond_Always);
  const ImGuiWindowFlags flags = ImGuiWindowFlags_NoMove | ImGuiWindowFlags_NoResize |
                                 ImGuiWindowFlags_NoCollapse | ImGuiWindowFlags_NoSavedSettings |
                                 ImGuiWindowFlags_NoBringToFrontOnFocus;
  return ImGui::Begin(name, nullptr, flags);
}

template <class View, class Build>
const View& VizUi::cached(Cached<View>& cache, const std::string& selection, PanelSize size,
                          Build build) {
  const std::string key = std::to_string(version_) + "|" + std::to_string(size.width) + "x" +
                          std::to_string(size.height) + "|" + selection;
  if (key != cache.key) {
    cache.view = build(size);
    cache.key = key;
  }
  return cache.view;
}

void VizUi::refresh() {
  const std::uint64_t v = source_.version();
  if (v == version_) return;
  version_ = v;
  snapshot_ = source_.snapshot();
  // A trace may hold only some ranks: fall back to its first.
  const bool known = std::any_of(snapshot_.status.begin(), snapshot_.status.end(),
                                 [&](const RankStatus& st) { return st.rank == state_.rank; });
  if (!known && !snapshot_.status.empty()) state_.rank = snapshot_.status.front().rank;
}

void VizUi::frame(float width, float height) {
  refresh();
  // The layer selector follows the focused rank's op (as it steps, or another rank is clicked)
  // unless a layer was picked.
  state_.layer.layer = shown_layer(snapshot_, state_.rank, state_.layer);
  regions_.clear();
  const float left = std::floor(width * 0.22f), mid = std::floor(width * 0.62f);
  const float top = std::floor(height * 0.50f), low = std::floor(height * 0.74f);
  controls({0, 0, left, height});
  shard_layout({left, 0, mid, top});
  tensor_inspector({mid, 0, width, top});
  collectives({left, top, width, low});
  memory({left, low, std::floor(width * 0.72f), height});
  check({std::floor(width * 0.72f), low, width, height});
  keys();
  if (state_.help) help_overlay(width, height);
}

// ---- Keys and the help overlay -----------------------------------------------------------------

void VizUi::keys() {
  const ImGuiIO& io = ImGui::GetIO();
  if (io.WantTextInput) return;  // typing a breakpoint
  // With ImGui 1.86's GLFW backend, io.KeysDown is indexed by GLFW key codes: a letter's is its
  // uppercase ASCII (GLFW_KEY_A is 'A'), '/' is GLFW_KEY_SLASH.
  static_assert(GLFW_KEY_A == 'A' && GLFW_KEY_Z == 'Z', "GLFW letter keys are uppercase ASCII");
  const bool idle = source_.idle();
  for (const Control& c : viz::controls()) {
    if (ImGui::IsKeyPressed(std::toupper(static_cast<unsigned char>(c.key)), false) &&
        command_enabled(c.command, idle, snapshot_)) {
      state_.message.clear();
      run_command(source_, c.command);
    }
  }
  const int help = std::toupper(static_cast<unsigned char>(kHelpKey));
  if (ImGui::IsKeyPressed(help, false) ||
      (io.KeyShift && ImGui::IsKeyPressed(GLFW_KEY_SLASH, false))) {
    state_.help = !state_.help;
  }
  if (state_.help && ImGui::IsKeyPressed(ImGui::GetKeyIndex(ImGuiKey_Escape), false)) {
    state_.help = false;
  }
}

void VizUi::help_overlay(float width, float height) {
  ImGui::SetNextWindowPos(ImVec2(width * 0.5f, height * 0.5f), ImGuiCond_Always,
                          ImVec2(0.5f, 0.5f));
  ImGui::SetNextWindowBgAlpha(0.92f);
  const ImGuiWindowFlags flags = ImGuiWindowFlags_AlwaysAutoResize | ImGuiWindowFlags_NoMove |
                                 ImGuiWindowFlags_NoCollapse | ImGuiWindowFlags_NoSavedSettings;
  bool open = true;
  if (ImGui::Begin("Keys", &open, flags)) {
    for (const std::string& line : help_lines()) ImGui::TextUnformatted(line.c_str());
  }
  ImGui::End();
  if (!open) state_.help = false;
}

std::optional<std::size_t> VizUi::selected_collective() const {
  if (state_.collective) {
    for (std::size_t i = 0; i < snapshot_.events.size(); ++i) {
      const TraceEvent& e = snapshot_.events[i];
      if (e.kind == TraceEventKind::collective && e.rank == state_.collective->first &&
          e.ts_us == state_.collective->second) {
        return i;
      }
    }
  }
  return latest_collective();
}

void VizUi::zoom_and_pan(const TimelineView& v, float mouse_x, float width) {
  const ImGuiIO& io = ImGui::GetIO();
  const double begin = v.begin_us, end = v.end_us, span = std::max(end - begin, 1e-3);
  const float lanes_x0 = theme::kPanelPadding + theme::kLaneLabelWidth;
  const float lanes_w = std::max(width - lanes_x0 - theme::kPanelPadding, 1.0f);
  if (ImGui::IsMouseDoubleClicked(ImGuiMouseButton_Left)) {
    state_.time_begin = state_.time_end = 0;
  } else if (io.MouseWheel != 0) {
    const double at = begin + span * std::clamp((mouse_x - lanes_x0) / lanes_w, 0.0f, 1.0f);
    const double scale = std::pow(0.8, static_cast<double>(io.MouseWheel));
    state_.time_begin = at - (at - begin) * scale;
    state_.time_end = at + (end - at) * scale;
  } else if (ImGui::IsMouseDragging(ImGuiMouseButton_Right)) {
    const double shift = -static_cast<double>(io.MouseDelta.x) / lanes_w * span;
    state_.time_begin = begin + shift;
    state_.time_end = end + shift;
  }
}

std::optional<std::size_t> VizUi::latest_collective() const {
  for (std::size_t i = snapshot_.events.size(); i-- > 0;) {
    const TraceEvent& e = snapshot_.events[i];
    if (e.kind == TraceEventKind::collective && e.rank == state_.rank) return i;
  }
  return std::nullopt;
}

// ---- Controls ----------------------------------------------------------------------------------

void VizUi::controls(const Rect& r) {
  if (begin_panel("Controls", r)) {
    ImGui::TextWrapped("%s", snapshot_.source.c_str());
    const std::string stack =
        snapshot_.config.layers > 1 ? " L=" + std::to_string(snapshot_.config.layers) : "";
    ImGui::TextColored(to_float4(theme::kTextDim), "%s, t=%d, s=%lld b=%lld h=%lld a=%lld%s",
                       mode_name(snapshot_.config.mode), snapshot_.config.degree,
                       static_cast<long long>(snapshot_.config.seq),
                       static_cast<long long>(snapshot_.config.batch),
                       static_cast<long long>(snapshot_.config.hidden),
                       static_cast<long long>(snapshot_.config.heads), stack.c_str());
    ImGui::Separator();
    const bool idle = source_.idle();
    // The buttons and their keys come from one table (viz/model/controls.h): two a row.
    const std::vector<Control>& table = viz::controls();
    for (std::size_t i = 0; i < table.size(); ++i) {
      const Control& c = table[i];
      if (i % 2 == 1 || i == table.size() - 1) ImGui::SameLine();
      ImGui::BeginDisabled(!command_enabled(c.command, idle, snapshot_));
      const std::string label = c.button + " (" + c.key + ")";
      if (ImGui::Button(label.c_str())) {
        state_.message.clear();
        run_command(source_, c.command);
      }
      ImGui::EndDisabled();
    }
    ImGui::SetNextItemWidth(-60);
    ImGui::InputTextWithHint("##break", "op | scope/op | layer N | phase backward",
                             state_.breakpoint, sizeof state_.breakpoint);
    ImGui::SameLine();
    if (ImGui::Button("Break") && state_.breakpoint[0]) {
      try {
        source_.add_breakpoint(Breakpoint::parse(state_.breakpoint));
        state_.message = std::string("breakpoint: ") + state_.breakpoint;
        state_.breakpoint[0] = 0;
      } catch (const std::exception& e) {
        state_.message = e.what();
      }
    }
    if (ImGui::SmallButton("Clear breakpoints")) source_.clear_breakpoints();
    ImGui::SameLine();
    if (ImGui::SmallButton("Keys (h)")) state_.help = !state_.help;
    if (!state_.message.empty()) ImGui::TextWrapped("%s", state_.message.c_str());
    if (!snapshot_.error.empty()) {
      ImGui::TextColored(to_float4(theme::kFailed), "%s", snapshot_.error.c_str());
    }
    if (!snapshot_.warning.empty()) {
      ImGui::PushStyleColor(ImGuiCol_Text, to_float4(theme::kWarning));
      ImGui::TextWrapped("incomplete trace: %s", snapshot_.warning.c_str());
      ImGui::PopStyleColor();
    }
    layer_selector();
    ImGui::Separator();
    ImGui::Text("Ranks (click one to show its op)");
    for (const RankStatus& st : snapshot_.status) {
      ImGui::PushID(st.rank);
      ImGui::PushStyleColor(ImGuiCol_Text, to_float4(theme::rank_color(st.rank)));
      char label[48];
      std::snprintf(label, sizeof label, "rank %d: %s", st.rank, rank_state_name(st.state));
      if (ImGui::Selectable(label, state_.rank == st.rank)) state_.rank = st.rank;
      ImGui::PopStyleColor();
      if (!st.summary.empty()) {
        ImGui::TextColored(to_float4(theme::kTextDim), "%s", st.summary.c_str());
      }
      ImGui::TextWrapped("%s", st.where.c_str());
      ImGui::PopID();
    }
    ImGui::Separator();
    ImGui::TextColored(to_float4(theme::kTextDim), "%zu of %llu events", snapshot_.events.size(),
                       static_cast<unsigned long long>(snapshot_.total_events));
  }
  ImGui::End();
}

// A stack's layer for the shard layout, memory and collectives' layer table: the focused rank's
// (follow op) or one picked on the slider. Not drawn for a single layer.
void VizUi::layer_selector() {
  const int layers = snapshot_.config.layers;
  if (layers <= 1) return;
  ImGui::Separator();
  ImGui::Text("Layer shown (shard layout, memory)");
  ImGui::Checkbox("follow op##layer", &state_.layer.follow);
  ImGui::SameLine();
  ImGui::SetNextItemWidth(-1);
  const std::string format = "layer %d of " + std::to_string(layers);
  int layer = state_.layer.layer;
  if (ImGui::SliderInt("##layer", &layer, 0, layers - 1, format.c_str()) &&
      layer != state_.layer.layer) {
    state_.layer.layer = std::clamp(layer, 0, layers - 1);
    state_.layer.follow = false;
  }
}

// ---- Shard layout ------------------------------------------------------------------------------

void VizUi::shard_layout(const Rect& r) {
  if (begin_panel("Shard layout", r)) {
    const ShardView& v =
        cached(shard_cache_, layer_key(), size_below_a_line(), [&](PanelSize size) {
          return shard_view(snapshot_, state_.rank, size, state_.layer.layer);
        });
    ImGui::TextUnformatted(v.title.c_str());
    Canvas c = begin_canvas();
    for (const LogicalTensorView& t : v.tensors) {
      fill(c, t.frame, theme::kPanelBackground);
      for (const ShardPiece& p : t.pieces) {
        switch (p.style) {
          case PieceStyle::shard:
          case PieceStyle::replicate:
            fill(c, p.rect, p.fill);
            break;
          case PieceStyle::partial:
            hatch(c, p.rect, p.fill);
            break;
        }
        outline(c, p.rect, p.outline, theme::kOutlineWidth * 0.5f);
      }
      outline(c, t.frame, theme::kOutline, t.weight ? 1.0f : theme::kOutlineWidth);
      for (const Label& l : t.labels) text(c, l);
    }
    for (const Label& l : v.notes) text(c, l);
    if (const auto m = c.mouse()) {
      if (const ShardPiece* p = shard_piece_at(v, m->x, m->y)) {
        outline(c, p->rect, theme::kSelection, theme::kOutlineWidth);
        ImGui::SetTooltip("%s", p->tooltip.c_str());
      }
    }
    end_canvas(c);
  }
  ImGui::End();
}

// ---- Tensor inspector --------------------------------------------------------------------------

void VizUi::tensor_inspector(const Rect& r) {
  if (begin_panel("Tensor inspector", r)) {
    if (snapshot_.tensors.empty()) {
      ImGui::TextWrapped("%s", snapshot_.live ? "no tensor values yet (they are read while every "
                                                "rank is paused)"
                                              : "a trace holds no tensor values; run live to "
                                                "inspect them");
    } else {
      state_.tensor = inspected_tensor(snapshot_, state_.tensor, state_.follow_op);
      ImGui::Checkbox("follow op", &state_.follow_op);
      ImGui::SameLine();
      ImGui::SetNextItemWidth(r.width() * 0.35f);
      if (ImGui::BeginCombo("##tensor", state_.tensor.c_str())) {
        // The paused op's inputs and output first, then the layer's named tensors.
        for (const TensorValues& t : snapshot_.tensors) {
          if (ImGui::Selectable(t.name.c_str(), t.name == state_.tensor)) {
            state_.tensor = t.name;
            state_.follow_op = t.at_op;
          }
        }
        ImGui::EndCombo();
      }
      ImGui::SameLine();
      ImGui::RadioButton("full", &state_.tensor_rank, -1);
      for (int k = 0; k < snapshot_.ranks; ++k) {
        ImGui::SameLine();
        char label[16];
        std::snprintf(label, sizeof label, "r%d", k);
        ImGui::RadioButton(label, &state_.tensor_rank, k);
      }
      const std::optional<HeatMap>& h =
          cached(heat_cache_, state_.tensor + "@" + std::to_string(state_.tensor_rank),
                 size_below_a_line(), [&](PanelSize size) {
                   return heat_map(snapshot_, state_.tensor, state_.tensor_rank, size);
                 });
      ImGui::TextUnformatted(h ? h->title.c_str() : "");
      Canvas c = begin_canvas();
      if (h) {
        for (const auto& [rect, color] : h->cells) fill(c, rect, color);
        for (const Line& l : h->shard_outlines) line(c, l);
        outline(c, h->frame, theme::kOutline);
        char range[64];
        std::snprintf(range, sizeof range, "min %.4g  max %.4g", h->min_value, h->max_value);
        text(c, {h->frame.x0, h->frame.y1 + 2, range, theme::kTextDim});
      } else {
        text(c, {0, 0, "no values of " + state_.tensor + " yet", theme::kTextDim});
      }
      end_canvas(c);
    }
  }
  ImGui::End();
}

// ---- Collectives -------------------------------------------------------------------------------

void VizUi::collectives(const Rect& r) {
  if (begin_panel("Collectives", r)) {
    const float table_width = std::floor(r.width() * 0.36f);
    ImGui::BeginChild("timeline", ImVec2(r.width() - table_width - 24, 0));
    Canvas c = begin_canvas();
    // Until a box is clicked, the selected rank's latest collective is shown with its flows.
    TimelineViewport viewport;
    viewport.selected = selected_collective();
    viewport.begin_us = state_.time_begin;
    viewport.end_us = state_.time_end;
    if (snapshot_.config.layers > 1) viewport.layer = state_.layer.layer;
    char key[112];
    std::snprintf(key, sizeof key, "%lld|%.3f|%.3f|%d",
                  viewport.selected ? static_cast<long long>(*viewport.selected) : -1LL,
                  viewport.begin_us, viewport.end_us, viewport.layer.value_or(-1));
    const TimelineView& v = cached(timeline_cache_, key, c.size, [&](PanelSize size) {
      return timeline_view(snapshot_, viewport, size);
    });
    for (const Rect& lane : v.lanes) fill(c, lane, theme::kPanelBackground);
    for (const Label& l : v.lane_labels) text(c, l);
    for (const TimelineBox& b : v.boxes) {
      fill(c, b.rect, b.fill);
      if (!b.label.empty()) text(c, {b.rect.x0 + 2, b.rect.y0 + 2, b.label, theme::kBackground});
      if (viewport.selected && b.event == *viewport.selected) {
        outline(c, b.rect, theme::kSelection, theme::kOutlineWidth);
      }
    }
    for (const Line& l : v.flows) line(c, l);
    for (const Label& l : v.flow_labels) text(c, l);
    if (v.cursor) line(c, *v.cursor);
    if (const auto m = c.mouse()) {
      if (const TimelineBox* b = timeline_box_at(v, m->x, m->y)) {
        ImGui::SetTooltip("%s", b->tooltip.c_str());
        if (ImGui::IsMouseClicked(ImGuiMouseButton_Left) && b->event < snapshot_.events.size()) {
          const TraceEvent& e = snapshot_.events[b->event];
          state_.collective = std::make_pair(e.rank, e.ts_us);
        }
      }
      zoom_and_pan(v, m->x, c.size.width);
    }
    end_canvas(c);
    ImGui::EndChild();
    ImGui::SameLine();
    ImGui::BeginChild("totals");
    if (viewport.layer) {
      // The stack's table in the upper half, the selected layer's below it.
      ImGui::Text("step 0 per rank, all %d layers, measured vs model", snapshot_.config.layers);
      const float half = std::floor(ImGui::GetContentRegionAvail().y * 0.5f);
      comm_table("comm", v.totals, half);
      ImGui::Text("layer %d", *viewport.layer);
      comm_table("comm_layer", v.layer_totals, 0);
    } else {
      ImGui::Text("step 0 per rank, measured vs model");
      comm_table("comm", v.totals, 0);
    }
    ImGui::EndChild();
  }
  ImGui::End();
}

// One table of collectives against the model; height 0: the rest of the child window.
void VizUi::comm_table(const char* id, const std::vector<CommTotalRow>& rows, float height) {
  const ImGuiTableFlags flags = ImGuiTableFlags_RowBg | ImGuiTableFlags_BordersInnerV |
                                ImGuiTableFlags_SizingStretchProp | ImGuiTableFlags_ScrollY;
  if (!ImGui::BeginTable(id, 4, flags, ImVec2(0, height))) return;
  ImGui::TableSetupColumn("call");
  ImGui::TableSetupColumn("n");
  ImGui::TableSetupColumn("bytes");
  ImGui::TableSetupColumn("model");
  ImGui::TableHeadersRow();
  for (const CommTotalRow& row : rows) {
    ImGui::TableNextRow();
    ImGui::TableNextColumn();
    ImGui::Text("%s %s %s", row.kind.c_str(), row.phase.c_str(), row.purpose.c_str());
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(row.calls_text.c_str());
    ImGui::TableNextColumn();
    ImGui::Text("%s", byte_size_text(row.bytes).c_str());
    ImGui::TableNextColumn();
    ImGui::TextColored(to_float4(row.model_color), "%s", row.model_text.c_str());
  }
  ImGui::EndTable();
}

// ---- Memory ------------------------------------------------------------------------------------

void VizUi::memory(const Rect& r) {
  if (begin_panel("Memory", r)) {
    const float table_width = std::floor(r.width() * 0.5f);
    ImGui::BeginChild("charts", ImVec2(r.width() - table_width - 24, 0));
    Canvas c = begin_canvas();
    const MemoryView& v = cached(memory_cache_, layer_key(), c.size, [&](PanelSize size) {
      return memory_view(snapshot_, state_.rank, size, state_.layer.layer);
    });
    for (const MemoryChart& chart : v.charts) {
      fill(c, chart.frame, theme::kPanelBackground);
      for (const auto& [rect, color] : chart.segments) fill(c, rect, color);
      for (const Line& l : chart.peaks) line(c, l);
      for (const Label& l : chart.labels) text(c, l);
    }
    for (const Label& l : v.legend) text(c, l);
    end_canvas(c);
    ImGui::EndChild();
    ImGui::SameLine();
    ImGui::BeginChild("saved");
    const int layers = snapshot_.config.layers;
    if (layers > 1) {
      ImGui::TextWrapped("rank %d, layer %d of %d, saved activations: %s of %s (%s)", state_.rank,
                         v.layer, layers, byte_size_text(v.saved_total).c_str(),
                         byte_size_text(v.formula_total).c_str(), v.formula.c_str());
    } else {
      ImGui::TextWrapped("rank %d saved activations: %s of %s (%s)", state_.rank,
                         byte_size_text(v.saved_total).c_str(),
                         byte_size_text(v.formula_total).c_str(), v.formula.c_str());
    }
    const ImGuiTableFlags flags = ImGuiTableFlags_RowBg | ImGuiTableFlags_BordersInnerV |
                                  ImGuiTableFlags_SizingStretchProp | ImGuiTableFlags_ScrollY;
    // In a stack the layer's terms take the upper part, every layer's totals the rest.
    const float line = ImGui::GetTextLineHeightWithSpacing();
    const float terms_height =
        layers > 1 ? std::max(3 * line, ImGui::GetContentRegionAvail().y -
                                            line * static_cast<float>(3 + std::min(layers, 4)))
                   : 0.0f;
    if (ImGui::BeginTable("terms", 4, flags, ImVec2(0, terms_height))) {
      ImGui::TableSetupColumn("term");
      ImGui::TableSetupColumn("formula");
      ImGui::TableSetupColumn("model");
      ImGui::TableSetupColumn("measured");
      ImGui::TableHeadersRow();
      for (const SavedTermRow& row : v.saved) {
        ImGui::TableNextRow();
        ImGui::TableNextColumn();
        ImGui::Text("%s", row.what.c_str());
        ImGui::TableNextColumn();
        ImGui::Text("%s", row.formula.c_str());
        ImGui::TableNextColumn();
        ImGui::Text("%s", byte_size_text(row.model_bytes).c_str());
        ImGui::TableNextColumn();
        ImGui::TextColored(to_float4(row.complete ? theme::kPassed : theme::kPending), "%s",
                           byte_size_text(row.measured_bytes).c_str());
      }
      ImGui::EndTable();
    }
    if (layers > 1) stack_memory(v);
    ImGui::EndChild();
  }
  ImGui::End();
}

// A stack's saved activations: the total beside L times the formula, then each layer's.
void VizUi::stack_memory(const MemoryView& v) {
  const int layers = snapshot_.config.layers;
  ImGui::Text("stack: %s of %d x %s = %s", byte_size_text(v.stack_saved_total).c_str(), layers,
              byte_size_text(v.formula_total).c_str(),
              byte_size_text(v.stack_formula_total).c_str());
  if (v.outside_saved > 0) {
    ImGui::SameLine();
    ImGui::TextColored(to_float4(theme::kWarning), "(%s outside the layers)",
                       byte_size_text(v.outside_saved).c_str());
  }
  const ImGuiTableFlags flags = ImGuiTableFlags_RowBg | ImGuiTableFlags_BordersInnerV |
                                ImGuiTableFlags_SizingStretchProp | ImGuiTableFlags_ScrollY;
  if (!ImGui::BeginTable("layers", 3, flags)) return;
  ImGui::TableSetupColumn("layer");
  ImGui::TableSetupColumn("model");
  ImGui::TableSetupColumn("measured");
  ImGui::TableHeadersRow();
  for (const LayerSavedRow& row : v.layers) {
    ImGui::TableNextRow();
    ImGui::TableNextColumn();
    if (row.layer == v.layer) {
      ImGui::TextColored(to_float4(theme::kSelection), "%d (shown)", row.layer);
    } else {
      ImGui::Text("%d", row.layer);
    }
    ImGui::TableNextColumn();
    ImGui::Text("%s", byte_size_text(row.model_bytes).c_str());
    ImGui::TableNextColumn();
    ImGui::TextColored(to_float4(row.complete ? theme::kPassed : theme::kPending), "%s",
                       byte_size_text(row.measured_bytes).c_str());
  }
  ImGui::EndTable();
}

// ---- Check -------------------------------------------------------------------------------------

void VizUi::check(const Rect& r) {
  if (begin_panel("Check", r)) {
    const CheckView& v =
        cached(check_cache_, "", {}, [&](PanelSize) { return check_view(snapshot_); });
    ImGui::TextWrapped("%s", v.summary.c_str());
    const ImGuiTableFlags flags = ImGuiTableFlags_RowBg | ImGuiTableFlags_BordersInnerV |
                                  ImGuiTableFlags_SizingStretchProp | ImGuiTableFlags_ScrollY;
    if (!v.rows.empty() && ImGui::BeginTable("check", 4, flags)) {
      ImGui::TableSetupColumn("tensor");
      ImGui::TableSetupColumn("failed");
      ImGui::TableSetupColumn("max abs");
      ImGui::TableSetupColumn("max rel");
      ImGui::TableHeadersRow();
      for (const CheckView::Row& row : v.rows) {
        ImGui::TableNextRow();
        ImGui::TableNextColumn();
        ImGui::TextColored(to_float4(row.color), "%s", row.name.c_str());
        ImGui::TableNextColumn();
        ImGui::TextColored(to_float4(row.color), "%s", row.failed.c_str());
        ImGui::TableNextColumn();
        ImGui::Text("%s", row.abs_err.c_str());
        ImGui::TableNextColumn();
        ImGui::TextColored(to_float4(row.color), "%s", row.rel_err.c_str());
      }
      ImGui::EndTable();
    }
  }
  ImGui::End();
}

}  // namespace shardscope::viz
