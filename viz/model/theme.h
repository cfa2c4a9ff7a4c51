// Every colour and size the visualizer draws with, named in one place. Colours are packed RGBA in
// Dear ImGui's order (IM_COL32: 0xAABBGGRR) so the drawing code passes them straight through, but
// nothing here depends on ImGui: the view model and its tests use the same constants.
#pragma once

#include <array>
#include <cstdint>

#include "autograd/observer.h"

namespace shardscope::viz {

using Color = std::uint32_t;

constexpr Color rgba(std::uint8_t r, std::uint8_t g, std::uint8_t b, std::uint8_t a = 255) {
  return static_cast<Color>(r) | (static_cast<Color>(g) << 8) | (static_cast<Color>(b) << 16) |
         (static_cast<Color>(a) << 24);
}
constexpr std::uint8_t red_of(Color c) {
  return static_cast<std::uint8_t>(c & 0xFF);
}
constexpr std::uint8_t green_of(Color c) {
  return static_cast<std::uint8_t>((c >> 8) & 0xFF);
}
constexpr std::uint8_t blue_of(Color c) {
  return static_cast<std::uint8_t>((c >> 16) & 0xFF);
}

namespace theme {

// Ranks 0..7 (rank r uses kRankColors[r % 8]): saturated, far apart, readable on the background.
inline constexpr std::array<Color, 8> kRankColors{
    rgba(230, 85, 70),    // red
    rgba(60, 160, 230),   // blue
    rgba(90, 200, 90),    // green
    rgba(240, 180, 40),   // amber
    rgba(170, 100, 220),  // violet
    rgba(40, 200, 190),   // teal
    rgba(240, 120, 180),  // pink
    rgba(150, 150, 60),   // olive
};
inline Color rank_color(int rank) {
  return kRankColors[static_cast<std::size_t>(rank < 0 ? 0 : rank) % kRankColors.size()];
}

inline constexpr Color kBackground = rgba(24, 26, 30);
inline constexpr Color kPanelBackground = rgba(34, 37, 43);
inline constexpr Color kText = rgba(225, 228, 232);
inline constexpr Color kTextDim = rgba(140, 146, 156);
inline constexpr Color kGrid = rgba(70, 75, 85);
inline constexpr Color kOutline = rgba(235, 235, 235);
inline constexpr Color kSelection = rgba(255, 255, 255);
inline constexpr Color kFailed = rgba(235, 60, 60);
inline constexpr Color kPassed = rgba(80, 200, 110);
inline constexpr Color kPending = rgba(140, 146, 156);
inline constexpr Color kWarning = rgba(240, 170, 60);   // a trace cut short
inline constexpr Color kFormula = rgba(255, 255, 255);  // the formula's line beside measured bars
inline constexpr Color kPeak = rgba(255, 80, 80);
inline constexpr Color kCursor = rgba(255, 230, 90);

// Collectives by kind (CollectiveKind's order).
inline constexpr std::array<Color, 6> kCollectiveColors{
    rgba(230, 120, 60),   // all_reduce
    rgba(70, 170, 240),   // all_gather
    rgba(120, 210, 90),   // reduce_scatter
    rgba(200, 110, 230),  // all_to_all
    rgba(230, 200, 70),   // broadcast
    rgba(150, 150, 150),  // barrier
};
inline Color collective_color(CollectiveKind kind) {
  return kCollectiveColors[static_cast<std::size_t>(kind)];
}

// Memory categories (MemoryCategory's order).
inline constexpr std::array<Color, kMemoryCategoryCount> kMemoryColors{
    rgba(110, 120, 140),  // parameter
    rgba(160, 130, 90),   // gradient
    rgba(80, 150, 220),   // activation
    rgba(240, 140, 60),   // saved_activation
    rgba(240, 200, 90),   // saved_extra
    rgba(130, 200, 160),  // workspace
    rgba(200, 100, 200),  // communication
};
inline Color memory_color(MemoryCategory c) {
  return kMemoryColors[static_cast<std::size_t>(c)];
}

// Sizes in pixels.
inline constexpr float kFoldPixels = 3.0f;   // boxes narrower than this fold into one
inline constexpr float kLaneHeight = 22.0f;  // one rank's lane in the collectives timeline
inline constexpr float kLaneGap = 4.0f;
inline constexpr float kLaneLabelWidth = 56.0f;
inline constexpr float kTensorGap = 18.0f;    // between tensors in the shard panel
inline constexpr float kLabelHeight = 16.0f;  // one line of text
inline constexpr float kCharWidth = 7.0f;     // Dear ImGui's default font: 7 px a character
inline constexpr float kOutlineWidth = 2.0f;
inline constexpr float kPanelPadding = 8.0f;
inline constexpr int kHeatMapMaxCells = 96;  // per side; larger tensors are folded (max |x|)

}  // namespace theme
}  // namespace shardscope::viz

// ---- Shard layout and tensor inspector ---------------------------------------------------------
// (Section owned by the shard view, check view and heat map: viz/model/shard_view.cpp,
// check_view.cpp, heat_map.cpp.)
namespace shardscope::viz {

constexpr Color with_alpha(Color c, std::uint8_t a) {
  return (c & 0x00FFFFFFu) | (static_cast<Color>(a) << 24);
}
constexpr std::uint8_t alpha_of(Color c) {
  return static_cast<std::uint8_t>((c >> 24) & 0xFF);
}

namespace theme {

// Replicate bands and Partial summands are filled at this alpha (a Shard piece is opaque), so the
// three styles differ even where the drawing code adds no hatching.
inline constexpr std::uint8_t kSharedPieceAlpha = 110;
// Labels are laid out without font metrics: ImGui's default 13 px font is about 7 px a glyph.
inline constexpr float kApproxCharWidth = 7.0f;
// The heat map's diverging scale: negative end, zero, positive end (linear in between).
inline constexpr Color kHeatNegative = rgba(70, 130, 235);
inline constexpr Color kHeatZero = rgba(44, 47, 54);
inline constexpr Color kHeatPositive = rgba(235, 95, 60);

}  // namespace theme
}  // namespace shardscope::viz
