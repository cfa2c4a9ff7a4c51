// Drawing primitives over ImDrawList: see draw.h.
#include "viz/app/draw.h"

#include <algorithm>
#include <cmath>

namespace shardscope::viz {

std::optional<ImVec2> Canvas::mouse() const {
  const ImVec2 m = ImGui::GetIO().MousePos;
  const float x = m.x - origin.x, y = m.y - origin.y;
  if (!ImGui::IsWindowHovered() || x < 0 || y < 0 || x >= size.width || y >= size.height) {
    return std::nullopt;
  }
  return ImVec2(x, y);
}

Canvas begin_canvas(float reserve_y) {
  Canvas c;
  c.draw = ImGui::GetWindowDrawList();
  c.origin = ImGui::GetCursorScreenPos();
  const ImVec2 avail = ImGui::GetContentRegionAvail();
  c.size = {std::max(avail.x, 1.0f), std::max(avail.y - reserve_y, 1.0f)};
  ImGui::InvisibleButton("canvas", ImVec2(c.size.width, c.size.height));
  c.draw->PushClipRect(c.origin, c.at(c.size.width, c.size.height), true);
  return c;
}

PanelSize size_below_a_line() {
  const ImVec2 avail = ImGui::GetContentRegionAvail();
  return {std::max(avail.x, 1.0f), std::max(avail.y - ImGui::GetTextLineHeightWithSpacing(), 1.0f)};
}

void end_canvas(const Canvas& c) {
  c.draw->PopClipRect();
}

void fill(const Canvas& c, const Rect& r, Color color) {
  c.draw->AddRectFilled(c.at(r.x0, r.y0), c.at(r.x1, r.y1), color);
}

void outline(const Canvas& c, const Rect& r, Color color, float thickness) {
  c.draw->AddRect(c.at(r.x0, r.y0), c.at(r.x1, r.y1), color, 0.0f, 0, thickness);
}

void text(const Canvas& c, const Label& l) {
  c.draw->AddText(c.at(l.x, l.y), l.color, l.text.c_str());
}

void line(const Canvas& c, const Line& l) {
  c.draw->AddLine(c.at(l.x0, l.y0), c.at(l.x1, l.y1), l.color, l.thickness);
  if (!l.arrow) return;
  const float dx = l.x1 - l.x0, dy = l.y1 - l.y0;
  const float len = std::sqrt(dx * dx + dy * dy);
  if (len < 1.0f) return;
  const float ux = dx / len, uy = dy / len, head = 7.0f;
  c.draw->AddTriangleFilled(
      c.at(l.x1, l.y1),
      c.at(l.x1 - ux * head - uy * head * 0.5f, l.y1 - uy * head + ux * head * 0.5f),
      c.at(l.x1 - ux * head + uy * head * 0.5f, l.y1 - uy * head - ux * head * 0.5f), l.color);
}

void hatch(const Canvas& c, const Rect& r, Color color) {
  c.draw->PushClipRect(c.at(r.x0, r.y0), c.at(r.x1, r.y1), true);
  const float step = 6.0f;
  for (float d = -r.height(); d < r.width(); d += step) {
    c.draw->AddLine(c.at(r.x0 + d, r.y1), c.at(r.x0 + d + r.height(), r.y0), color, 1.5f);
  }
  c.draw->PopClipRect();
}

ImVec4 to_float4(Color c) {
  return ImGui::ColorConvertU32ToFloat4(c);
}

}  // namespace shardscope::viz
