// The plain Catch2 main for cpu-labelled tests.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
