// The world of the Gloo test binary (tests/dist/gloo_main.cpp), built once by loom::init.
#pragma once

#include "loom/comm/world.hpp"

namespace loom::test {
loom::World& gloo_world();
}
