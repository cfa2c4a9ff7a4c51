// The drawing primitives the panels share: a canvas (a region of the current ImGui window whose
// coordinates are the view model's, origin at its top left) and the shapes of the view model
// (rects, lines with arrow heads, labels, Partial hatching) drawn on it with ImDrawList.
#pragma once

#include <imgui.h>

#include <optional>

#include "viz/model/view_model.h"

namespace shardscope::viz {

struct Canvas {
  ImDrawList* draw = nullptr;
  ImVec2 origin;
  PanelSize size;

  ImVec2 at(float x, float y) const { return ImVec2(origin.x + x, origin.y + y); }
  // The mouse in canvas coordinates, when it is over the canvas.
  std::optional<ImVec2> mouse() const;
};

// Claims the rest of the current window (less `reserve_y` pixels below) as a canvas, clipped.
Canvas begin_canvas(float reserve_y = 0);
// The canvas begin_canvas will claim after one line of text.
PanelSize size_below_a_line();
void end_canvas(const Canvas& c);

void fill(const Canvas& c, const Rect& r, Color color);
void outline(const Canvas& c, const Rect& r, Color color, float thickness = 1.0f);
void text(const Canvas& c, const Label& l);
void line(const Canvas& c, const Line& l);  // with an arrow head when l.arrow
// Diagonal hatching inside r: how a Partial summand is told apart from a shard.
void hatch(const Canvas& c, const Rect& r, Color color);
ImVec4 to_float4(Color c);

}  // namespace shardscope::viz
