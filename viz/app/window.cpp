// GLFW, OpenGL 3 and Dear ImGui set-up, frame by frame.
#include "viz/app/window.h"

#define GLFW_INCLUDE_NONE
#include <GL/gl.h>
#include <GLFW/glfw3.h>
#include <imgui.h>
#include <imgui_impl_glfw.h>
#include <imgui_impl_opengl3.h>
#include <stb_image_write.h>

#include <cstring>

#include "autograd/errors.h"
#include "viz/model/theme.h"

namespace shardscope::viz {
namespace {

std::string glfw_error;  // the last GLFW error, for the exception that follows it

void on_glfw_error(int code, const char* text) {
  glfw_error = "GLFW error " + std::to_string(code) + ": " + (text ? text : "");
}

}  // namespace

struct Window::Impl {
  GLFWwindow* window = nullptr;
  bool imgui = false;
};

Window::Window(const std::string& title, int width, int height, bool headless) : impl_(new Impl) {
  glfwSetErrorCallback(on_glfw_error);
  if (!glfwInit()) {
    delete impl_;
    throw Error("cannot open a display (" + glfw_error +
                "); on a machine without one run it under xvfb-run, or use scripts/viz.sh");
  }
  glfwWindowHint(GLFW_CONTEXT_VERSION_MAJOR, 3);
  glfwWindowHint(GLFW_CONTEXT_VERSION_MINOR, 3);
  glfwWindowHint(GLFW_OPENGL_PROFILE, GLFW_OPENGL_CORE_PROFILE);
  glfwWindowHint(GLFW_VISIBLE, headless ? GLFW_FALSE : GLFW_TRUE);
  impl_->window = glfwCreateWindow(width, height, title.c_str(), nullptr, nullptr);
  if (!impl_->window) {
    glfwTerminate();
    delete impl_;
    throw Error("cannot create a " + std::to_string(width) + "x" + std::to_string(height) +
                " window with an OpenGL 3.3 core context (" + glfw_error + ")");
  }
  glfwMakeContextCurrent(impl_->window);
  glfwSwapInterval(headless ? 0 : 1);
  IMGUI_CHECKVERSION();
  ImGui::CreateContext();
  ImGuiIO& io = ImGui::GetIO();
  io.IniFilename = nullptr;  // the layout is the program's, the same on every start
  ImGui::StyleColorsDark();
  ImGui_ImplGlfw_InitForOpenGL(impl_->window, true);
  ImGui_ImplOpenGL3_Init("#version 330 core");
  impl_->imgui = true;
}

Window::~Window() {
  if (impl_->imgui) {
    ImGui_ImplOpenGL3_Shutdown();
    ImGui_ImplGlfw_Shutdown();
    ImGui::DestroyContext();
  }
  glfwDestroyWindow(impl_->window);
  glfwTerminate();
  delete impl_;
}

bool Window::should_close() const {
  return glfwWindowShouldClose(impl_->window) != 0;
}

int Window::width() const {
  int w = 0, h = 0;
  glfwGetFramebufferSize(impl_->window, &w, &h);
  return w;
}

int Window::height() const {
  int w = 0, h = 0;
  glfwGetFramebufferSize(impl_->window, &w, &h);
  return h;
}

void Window::begin_frame() {
  glfwPollEvents();
  ImGui_ImplOpenGL3_NewFrame();
  ImGui_ImplGlfw_NewFrame();
  ImGui::NewFrame();
}

void Window::end_frame(Image* capture) {
  ImGui::Render();
  const int w = width(), h = height();
  glViewport(0, 0, w, h);
  const Color bg = theme::kBackground;
  glClearColor(red_of(bg) / 255.0f, green_of(bg) / 255.0f, blue_of(bg) / 255.0f, 1.0f);
  glClear(GL_COLOR_BUFFER_BIT);
  ImGui_ImplOpenGL3_RenderDrawData(ImGui::GetDrawData());
  if (capture) {
    capture->width = w;
    capture->height = h;
    capture->rgba.assign(static_cast<std::size_t>(w) * static_cast<std::size_t>(h) * 4, 0);
    glFinish();
    glReadBuffer(GL_BACK);
    glPixelStorei(GL_PACK_ALIGNMENT, 1);
    glReadPixels(0, 0, w, h, GL_RGBA, GL_UNSIGNED_BYTE, capture->rgba.data());
    // OpenGL's rows run bottom to top; images run top to bottom.
    const std::size_t row = static_cast<std::size_t>(w) * 4;
    std::vector<std::uint8_t> tmp(row);
    for (int y = 0; y < h / 2; ++y) {
      std::uint8_t* a = capture->rgba.data() + static_cast<std::size_t>(y) * row;
      std::uint8_t* b = capture->rgba.data() + static_cast<std::size_t>(h - 1 - y) * row;
      std::memcpy(tmp.data(), a, row);
      std::memcpy(a, b, row);
      std::memcpy(b, tmp.data(), row);
    }
  }
  glfwSwapBuffers(impl_->window);
}

void write_png(const Image& image, const std::string& path) {
  if (!stbi_write_png(path.c_str(), image.width, image.height, 4, image.rgba.data(),
                      image.width * 4)) {
    throw Error("cannot write the PNG " + path + " (" + std::to_string(image.width) + "x" +
                std::to_string(image.height) + ")");
  }
}

}  // namespace shardscope::viz
