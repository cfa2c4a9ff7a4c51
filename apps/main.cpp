// The shardscope executable.
#include <iostream>

#include "apps/cli.h"

int main(int argc, char** argv) {
  return shardscope::cli_main(argc, argv, std::cout, std::cerr);
}
