// `shardscope debug` on a terminal, driven through a pseudo-terminal as a person types: a prompt,
// each command shown once (the terminal's echo, not the session's too), and with libedit the up
// arrow brings back the previous command.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <pty.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>

#include "apps/debug_session.h"
#include "apps/line_reader.h"

namespace shardscope {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::size_t occurrences(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// Reads the terminal's output into `seen` until it holds `what` `count` times (true), the child
// closed it, or 60 s passed.
bool read_until(int fd, std::string& seen, const std::string& what, std::size_t count) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (occurrences(seen, what) < count) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    char buffer[4096];
    const ssize_t n = read(fd, buffer, sizeof buffer);
    if (n <= 0) return false;  // EIO: the child closed the terminal
    seen.append(buffer, static_cast<std::size_t>(n));
  }
  return true;
}

// Types `keys`. libedit prints its prompt before it turns the terminal's own echo off; keys typed
// in between would be shown twice (by the terminal, then by libedit), so with libedit wait until
// the echo is off first (a person does not type within that millisecond).
void type(int fd, const std::string& keys) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  termios mode{};
  while (line_editing_available() && tcgetattr(fd, &mode) == 0 && (mode.c_lflag & ECHO) != 0 &&
         std::chrono::steady_clock::now() < deadline) {
    usleep(1000);
  }
  ASSERT_EQ(write(fd, keys.data(), keys.size()), static_cast<ssize_t>(keys.size()));
}

TEST(DebugTerminal, PromptsEchoesEachCommandOnceAndRecallsHistory) {
  std::cout.flush();
  std::fflush(nullptr);
  int fd = -1;
  const pid_t child = forkpty(&fd, nullptr, nullptr, nullptr);
  ASSERT_GE(child, 0) << "forkpty failed";
  if (child == 0) {  // the session, on the terminal's slave side
    setenv("TERM", "xterm", 1);
    RunOptions o;
    o.spec.layer.mode = ParallelMode::tp;
    o.spec.layer.degree = 2;
    o.spec.layer.seq = 8;
    o.spec.layer.hidden = 16;
    o.spec.steps = 1;
    const int code = debug_main(o, std::cin, std::cout);
    std::cout.flush();
    _exit(code);
  }
  const std::string prompt = "(shardscope) ";
  std::string seen;
  ASSERT_TRUE(read_until(fd, seen, prompt, 1)) << seen;
  type(fd, "print attn.qkv.bias\n");
  ASSERT_TRUE(read_until(fd, seen, prompt, 2)) << seen;
  type(fd, "step\n");
  ASSERT_TRUE(read_until(fd, seen, prompt, 3)) << seen;
  if (line_editing_available()) {
    type(fd, "\x1b[A\n");  // up arrow: step again
    ASSERT_TRUE(read_until(fd, seen, prompt, 4)) << seen;
  }
  type(fd, "quit\n");
  read_until(fd, seen, "the run was stopped", 1);
  int status = 0;
  waitpid(child, &status, 0);
  close(fd);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << seen;
  EXPECT_EQ(occurrences(seen, "print attn.qkv.bias"), 1U) << seen;
  EXPECT_THAT(seen, Not(HasSubstr("> step"))) << seen;
  EXPECT_THAT(seen, HasSubstr("rank 1: attn.qkv.bias Shard(0) of [48]")) << seen;
  EXPECT_THAT(seen, HasSubstr("stop 2 at op 2")) << seen;
  if (!line_editing_available()) {
    GTEST_SKIP() << "history not checked: this build has no libedit (Debian: libedit-dev)";
  }
  EXPECT_THAT(seen, HasSubstr("stop 3 at op 3")) << seen;
}

}  // namespace
}  // namespace shardscope
