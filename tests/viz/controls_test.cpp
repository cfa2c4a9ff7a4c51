// The controls' table: every button and its keyboard shortcut run the same Source command, the
// keys are distinct, and the help overlay lists each one.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "viz/model/controls.h"

namespace shardscope::viz {
namespace {

// A Source that records which control it was sent.
class RecordingSource final : public Source {
 public:
  std::vector<std::string> calls;
  void step_op() override { calls.push_back("step_op"); }
  void next_collective() override { calls.push_back("next_collective"); }
  void step_layer() override { calls.push_back("step_layer"); }
  void run_continue() override { calls.push_back("run_continue"); }
  void pause() override { calls.push_back("pause"); }
  void add_breakpoint(const Breakpoint&) override {}
  void clear_breakpoints() override {}
  bool idle() override { return true; }
  bool wait_idle(std::chrono::milliseconds) override { return true; }
  std::uint64_t version() override { return 1; }
  Snapshot snapshot() override { return {}; }
};

// What each of the Controls panel's buttons did before the table (panels.cpp called these).
const std::map<std::string, std::string> kButtonActions = {{"Step op", "step_op"},
                                                           {"Next collective", "next_collective"},
                                                           {"Step layer", "step_layer"},
                                                           {"Continue", "run_continue"},
                                                           {"Pause", "pause"}};

TEST(Controls, EachKeyRunsWhatItsButtonRuns) {
  ASSERT_EQ(controls().size(), kButtonActions.size());
  std::set<char> keys;
  for (const Control& c : controls()) {
    ASSERT_TRUE(kButtonActions.count(c.button)) << c.button;
    EXPECT_TRUE(keys.insert(c.key).second) << "key " << c.key << " used twice";
    EXPECT_NE(c.key, kHelpKey) << c.button;
    EXPECT_TRUE(c.key >= 'a' && c.key <= 'z') << c.button;  // a GLFW letter key
    RecordingSource by_button, by_key, by_upper;
    run_command(by_button, c.command);
    const std::optional<Command> key = command_for_key(c.key);
    ASSERT_TRUE(key.has_value()) << c.key;
    run_command(by_key, *key);
    run_command(by_upper, *command_for_key(static_cast<char>(c.key - 'a' + 'A')));
    EXPECT_EQ(by_button.calls, std::vector<std::string>{kButtonActions.at(c.button)}) << c.button;
    EXPECT_EQ(by_key.calls, by_button.calls) << c.key;
    EXPECT_EQ(by_upper.calls, by_button.calls) << c.key;
  }
  EXPECT_EQ(command_for_key(kHelpKey), std::nullopt);
  EXPECT_EQ(command_for_key('x'), std::nullopt);
}

TEST(Controls, TheHelpListsEveryKeyAndButton) {
  const std::vector<std::string> lines = help_lines();
  for (const Control& c : controls()) {
    const std::string want = std::string(1, c.key) + "  " + c.button + ": ";
    bool found = false;
    for (const std::string& l : lines) found = found || l.rfind(want, 0) == 0;
    EXPECT_TRUE(found) << want;
  }
  bool help = false;
  for (const std::string& l : lines) help = help || l.rfind(std::string(1, kHelpKey) + " ", 0) == 0;
  EXPECT_TRUE(help);
}

TEST(Controls, StepsRunWhileStoppedAndPauseWhileALiveRunMoves) {
  Snapshot live;
  live.live = true;
  EXPECT_TRUE(command_enabled(Command::step_op, true, live));
  EXPECT_FALSE(command_enabled(Command::step_op, false, live));
  EXPECT_FALSE(command_enabled(Command::pause, true, live));
  EXPECT_TRUE(command_enabled(Command::pause, false, live));
  Snapshot done = live;
  done.finished = true;
  EXPECT_FALSE(command_enabled(Command::run_continue, true, done));
  Snapshot replay;
  EXPECT_FALSE(command_enabled(Command::pause, false, replay));
}

}  // namespace
}  // namespace shardscope::viz
