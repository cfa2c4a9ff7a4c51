// shardscope-viz: see viz/app/viz_main.h.
#include <iostream>

#include "viz/app/viz_main.h"

int main(int argc, char** argv) {
  return shardscope::viz::viz_main(argc, argv, std::cout, std::cerr);
}
