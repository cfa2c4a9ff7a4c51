// Window: a GLFW window with an OpenGL 3.3 context and a Dear ImGui context on it, and the frame
// loop's two halves. Headless windows are never shown (they still need an X display: Xvfb on a
// machine without one) and their frames can be read back as an RGBA image and written as PNG.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace shardscope::viz {

struct Image {
  int width = 0, height = 0;
  std::vector<std::uint8_t> rgba;  // rows top to bottom
};

class Window {
 public:
  // Throws Error naming what failed (no display, no OpenGL 3.3 context).
  Window(const std::string& title, int width, int height, bool headless);
  ~Window();
  Window(const Window&) = delete;
  Window& operator=(const Window&) = delete;

  bool should_close() const;
  // Polls input and starts an ImGui frame.
  void begin_frame();
  // Renders the frame; `capture` reads it back before it is shown.
  void end_frame(Image* capture = nullptr);
  int width() const;  // framebuffer pixels
  int height() const;

 private:
  struct Impl;
  Impl* impl_;
};

// Throws Error naming the path when it cannot be written.
void write_png(const Image& image, const std::string& path);

}  // namespace shardscope::viz
