// The translation unit that compiles the suites' shared precompiled header (tests/CMakeLists.txt).
