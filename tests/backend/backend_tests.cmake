# Tests of the backend layer (included from tests/tests.cmake).
set(TESSERA_FAKE_PLUGIN_DIR ${PROJECT_BINARY_DIR}/tests/fake_plugins)

# tessera_fake_plugin(<case dir> <file stem> <source> [compile definitions...])
# builds build/tests/fake_plugins/<case dir>/<file stem>.so
set(_fake_targets "")
function(tessera_fake_plugin dir stem src)
  set(_t fake_${dir}_${stem})
  string(REPLACE "-" "_" _t ${_t})
  add_library(${_t} MODULE ${CMAKE_CURRENT_LIST_DIR}/plugins/${src})
  set_target_properties(${_t} PROPERTIES PREFIX "" SUFFIX ".so" OUTPUT_NAME ${stem}
                        LIBRARY_OUTPUT_DIRECTORY ${TESSERA_FAKE_PLUGIN_DIR}/${dir}
                        C_STANDARD 11 C_VISIBILITY_PRESET hidden)
  target_include_directories(${_t} PRIVATE ${PROJECT_SOURCE_DIR}/include)
  target_compile_definitions(${_t} PRIVATE ${ARGN})
  set(_fake_targets ${_fake_targets} ${_t} PARENT_SCOPE)
endfunction()

set(_f fake_backend.c)
tessera_fake_plugin(gpu libtessera-fakegpu ${_f} FAKE_FAMILY="fakegpu" FAKE_DEVICE_PREFIX="FakeGPU" FAKE_SCORE=10)
tessera_fake_plugin(gpu2 libtessera-fakegpu ${_f} FAKE_FAMILY="fakegpu" FAKE_DEVICE_PREFIX="OtherGPU")
tessera_fake_plugin(cpu libtessera-fakecpu ${_f} FAKE_FAMILY="fakecpu" FAKE_DEVICE_PREFIX="FakeCPU"
                    FAKE_DEVICE_TYPE=TSR_DEVICE_TYPE_CPU)
tessera_fake_plugin(igpu libtessera-fakeigpu ${_f} FAKE_FAMILY="fakeigpu" FAKE_DEVICE_PREFIX="FakeIGPU"
                    FAKE_DEVICE_TYPE=TSR_DEVICE_TYPE_IGPU)
tessera_fake_plugin(nulldev libtessera-fakenull ${_f} FAKE_FAMILY="fakenull" FAKE_DEVICE_PREFIX="FakeNull"
                    FAKE_N_DEVICES=3 FAKE_NULL_DEVICE=1)
tessera_fake_plugin(baddev libtessera-fakebad ${_f} FAKE_FAMILY="fakebad" FAKE_DEVICE_PREFIX="FakeBad"
                    FAKE_N_DEVICES=2 FAKE_BAD_DEVICE=0)
tessera_fake_plugin(noentry libtessera-noentry no_entry.c)
tessera_fake_plugin(major libtessera-fakemajor ${_f} FAKE_FAMILY="fakemajor"
                    FAKE_API_MAJOR=TSR_BACKEND_API_MAJOR+1 FAKE_API_MINOR=3)
tessera_fake_plugin(score0 libtessera-fakezero ${_f} FAKE_FAMILY="fakezero" FAKE_SCORE=0)
tessera_fake_plugin(noinit libtessera-fakenoinit ${_f} FAKE_FAMILY="fakenoinit" FAKE_SCORE=5 FAKE_NO_INIT)
tessera_fake_plugin(initnull libtessera-fakeinitnull ${_f} FAKE_FAMILY="fakeinitnull" FAKE_INIT_NULL)
tessera_fake_plugin(short libtessera-fakeshort ${_f} FAKE_FAMILY="fakeshort" FAKE_DEVICE_PREFIX="FakeShort"
                    FAKE_SHORT_TABLES FAKE_API_MINOR=0)
tessera_fake_plugin(long libtessera-fakelong ${_f} FAKE_FAMILY="fakelong" FAKE_DEVICE_PREFIX="FakeLong"
                    FAKE_LONG_TABLES FAKE_API_MINOR=TSR_BACKEND_API_MINOR+3)
tessera_fake_plugin(variants libtessera-fakevar-low ${_f} FAKE_FAMILY="fakevar" FAKE_SCORE=3 FAKE_VARIANT="low")
tessera_fake_plugin(variants libtessera-fakevar-high ${_f} FAKE_FAMILY="fakevar" FAKE_SCORE=7 FAKE_VARIANT="high")
tessera_fake_plugin(variants libtessera-fakevar-zero ${_f} FAKE_FAMILY="fakevar" FAKE_SCORE=0 FAKE_VARIANT="zero")
tessera_fake_plugin(variants libtessera-fakevar-noscore ${_f} FAKE_FAMILY="fakevar" FAKE_VARIANT="noscore")
tessera_fake_plugin(fallback libtessera-fakefb-best ${_f} FAKE_FAMILY="fakefb" FAKE_SCORE=9 FAKE_INIT_NULL)
tessera_fake_plugin(fallback libtessera-fakefb-ok ${_f} FAKE_FAMILY="fakefb" FAKE_SCORE=2 FAKE_VARIANT="ok")
tessera_fake_plugin(base libtessera-fakebase-zero ${_f} FAKE_FAMILY="fakebase" FAKE_SCORE=0 FAKE_VARIANT="zero")
tessera_fake_plugin(base libtessera-fakebase ${_f} FAKE_FAMILY="fakebase" FAKE_VARIANT="base")
tessera_fake_plugin(planted libtessera-planted-evil ${_f} FAKE_FAMILY="planted" FAKE_SCORE=1000)
# Variants of family fakeid that score above the good one (ok, 8) but say
# the wrong thing about themselves: a reg name that is no name, another
# family's name, no devices, only an unusable device.
tessera_fake_plugin(identity libtessera-fakeid-badname ${_f} "FAKE_FAMILY=\"bad name/../x\"" FAKE_SCORE=100)
tessera_fake_plugin(identity libtessera-fakeid-nodev ${_f} FAKE_FAMILY="fakeid" FAKE_SCORE=90 FAKE_N_DEVICES=0)
tessera_fake_plugin(identity libtessera-fakeid-nulldev ${_f} FAKE_FAMILY="fakeid" FAKE_SCORE=80 FAKE_NULL_DEVICE=0)
tessera_fake_plugin(identity libtessera-fakeid-other ${_f} FAKE_FAMILY="otherfam" FAKE_SCORE=50)
tessera_fake_plugin(identity libtessera-fakeid-ok ${_f} FAKE_FAMILY="fakeid" FAKE_SCORE=8 FAKE_VARIANT="ok"
                    FAKE_DEVICE_PREFIX="FakeId")
# Stray libraries that claim the CPU family's place with score 100: the real
# CPU variant plugins must still be loaded.
tessera_fake_plugin(cpuid libtessera-cpu-x ${_f} "FAKE_FAMILY=\"bad name/../x\"" FAKE_SCORE=100
                    FAKE_DEVICE_TYPE=TSR_DEVICE_TYPE_CPU)
tessera_fake_plugin(cpuid libtessera-cpu-nodev ${_f} FAKE_FAMILY="cpu" FAKE_SCORE=100 FAKE_N_DEVICES=0)

# Devices whose default buffer type is NULL: a variant with only such a
# device above a good one, and a library where one of two devices has it.
tessera_fake_plugin(nullbuft libtessera-fakebuft-null ${_f} FAKE_FAMILY="fakebuft" FAKE_SCORE=50 FAKE_NULL_BUFT=0
                    FAKE_DEVICE_PREFIX="NullBuft")
tessera_fake_plugin(nullbuft libtessera-fakebuft-ok ${_f} FAKE_FAMILY="fakebuft" FAKE_SCORE=2 FAKE_VARIANT="ok"
                    FAKE_DEVICE_PREFIX="OkBuft")
tessera_fake_plugin(nullbuft2 libtessera-fakebuft2 ${_f} FAKE_FAMILY="fakebuft2" FAKE_N_DEVICES=2 FAKE_NULL_BUFT=1
                    FAKE_DEVICE_PREFIX="HalfBuft")
# Device names and descriptions: asked once (NULL after), a NULL
# description, and a device 0 whose name is no device name (device 1 is fine).
tessera_fake_plugin(nameonce libtessera-fakeonce ${_f} FAKE_FAMILY="fakeonce" FAKE_DEVICE_PREFIX="Once" FAKE_NAME_ONCE)
tessera_fake_plugin(descnull libtessera-fakedesc ${_f} FAKE_FAMILY="fakedesc" FAKE_DEVICE_PREFIX="NoDesc" FAKE_DESC_NULL)
tessera_fake_plugin(devnames libtessera-fakenl ${_f} FAKE_FAMILY="fakenl" FAKE_DEVICE_PREFIX="Nl" FAKE_N_DEVICES=2
                    "FAKE_BAD_NAME=\"Evil\\n0\"")
tessera_fake_plugin(devnames libtessera-fakeesc ${_f} FAKE_FAMILY="fakeesc" FAKE_DEVICE_PREFIX="Esc" FAKE_N_DEVICES=2
                    "FAKE_BAD_NAME=\"\\033[31mRed\"")
tessera_fake_plugin(devnames libtessera-fakespace ${_f} FAKE_FAMILY="fakespace" FAKE_DEVICE_PREFIX="Space"
                    FAKE_N_DEVICES=2 "FAKE_BAD_NAME=\"Two words\"")
tessera_fake_plugin(devnames libtessera-fakelongname ${_f} FAKE_FAMILY="fakelongname" FAKE_DEVICE_PREFIX="Long"
                    FAKE_N_DEVICES=2
                    "FAKE_BAD_NAME=\"L1234567890123456789012345678901234567890123456789012345678901234\"")
tessera_fake_plugin(devnames libtessera-fakeutf ${_f} FAKE_FAMILY="fakeutf" FAKE_DEVICE_PREFIX="Utf" FAKE_N_DEVICES=2
                    "FAKE_BAD_NAME=\"Gr\\xc3\\xbc\\xc3\\x9f\"")
tessera_fake_plugin(weird libtessera-fakeweird ${_f} FAKE_FAMILY="fakeweird" FAKE_DEVICE_PREFIX="Weird"
                    FAKE_WEIRD_STRINGS)
# Device names that clash with registered ones: FakeGPU0 as the gpu case's
# (all devices, one of two, a variant above a good one), and a blas library
# whose device is named "CPU".
tessera_fake_plugin(clash libtessera-fakeclash ${_f} FAKE_FAMILY="fakeclash" FAKE_DEVICE_PREFIX="FakeGPU")
tessera_fake_plugin(clash2 libtessera-fakeclash2 ${_f} FAKE_FAMILY="fakeclash2" FAKE_DEVICE_PREFIX="FakeGPU"
                    FAKE_N_DEVICES=2)
tessera_fake_plugin(clashvar libtessera-fakedup-high ${_f} FAKE_FAMILY="fakedup" FAKE_DEVICE_PREFIX="FakeGPU"
                    FAKE_SCORE=9)
tessera_fake_plugin(clashvar libtessera-fakedup-low ${_f} FAKE_FAMILY="fakedup" FAKE_DEVICE_PREFIX="DupOk"
                    FAKE_SCORE=2)
tessera_fake_plugin(hidecpu libtessera-blas ${_f} FAKE_FAMILY="blas" FAKE_DEVICE_TYPE=TSR_DEVICE_TYPE_CPU
                    "FAKE_BAD_NAME=\"CPU\"")
# Buffer types breaking backend.h: an alignment that is not a power of two,
# one of SIZE_MAX, buffers whose base address is NULL.
tessera_fake_plugin(buftbad libtessera-fakealign48 ${_f} FAKE_FAMILY="fakealign48" FAKE_DEVICE_PREFIX="Align48"
                    FAKE_ALIGN=48)
tessera_fake_plugin(buftbad libtessera-fakealignmax ${_f} FAKE_FAMILY="fakealignmax" FAKE_DEVICE_PREFIX="AlignMax"
                    FAKE_ALIGN=SIZE_MAX)
tessera_fake_plugin(buftbad libtessera-fakealignhuge ${_f} FAKE_FAMILY="fakealignhuge" FAKE_DEVICE_PREFIX="AlignHuge"
                    "FAKE_ALIGN=((size_t)1<<40)")
tessera_fake_plugin(buftbad libtessera-fakebasenull ${_f} FAKE_FAMILY="fakebasenull" FAKE_DEVICE_PREFIX="BaseNull"
                    FAKE_BASE_NULL)
# Plugins that call exit() while they are loaded: exit(0) in init, exit(3)
# in score, exit(4) in a constructor (plugin_exit_test.cpp,
# devices_cli_test.cpp).
tessera_fake_plugin(exitinit libtessera-fakeexit ${_f} FAKE_FAMILY="fakeexit" FAKE_EXIT_IN_INIT=0)
tessera_fake_plugin(exitscore libtessera-fakeexitscore-v ${_f} FAKE_FAMILY="fakeexitscore" FAKE_SCORE=5
                    FAKE_EXIT_IN_SCORE=3)
tessera_fake_plugin(exitctor libtessera-fakeexitctor ${_f} FAKE_FAMILY="fakeexitctor" FAKE_EXIT_AT_LOAD=4)
# Variants of family crashy whose score crashes (SIGILL), never returns, or
# writes into the probe's pipe, or whose init crashes or never returns,
# above a good one (plugin_exit_test.cpp: refused in the probe process).
tessera_fake_plugin(crashy libtessera-crashy-trap ${_f} FAKE_FAMILY="crashy" FAKE_SCORE=100 FAKE_CRASH_IN_SCORE)
tessera_fake_plugin(crashy libtessera-crashy-hang ${_f} FAKE_FAMILY="crashy" FAKE_SCORE=90 FAKE_HANG_IN_SCORE)
tessera_fake_plugin(crashy libtessera-crashy-forge ${_f} FAKE_FAMILY="crashy" FAKE_SCORE=80 FAKE_FORGE_IN_SCORE)
tessera_fake_plugin(crashy libtessera-crashy-inittrap ${_f} FAKE_FAMILY="crashy" FAKE_SCORE=70 FAKE_CRASH_IN_INIT)
tessera_fake_plugin(crashy libtessera-crashy-inithang ${_f} FAKE_FAMILY="crashy" FAKE_SCORE=60 FAKE_HANG_IN_INIT)
tessera_fake_plugin(crashy libtessera-crashy-ok ${_f} FAKE_FAMILY="crashy" FAKE_SCORE=1 FAKE_VARIANT="ok"
                    FAKE_DEVICE_PREFIX="Crashy")
# Variants that take their time: a score of 300 ms, a destructor that never
# returns (plugin_exit_test.cpp: probed side by side; the tests copy them
# into folders of their own).
tessera_fake_plugin(slowprobe libtessera-slowprobe-slow ${_f} FAKE_FAMILY="slowprobe" FAKE_SCORE=3 FAKE_SLOW_SCORE=300)
tessera_fake_plugin(slowprobe libtessera-slowprobe-unloadhang ${_f} FAKE_FAMILY="slowprobe" FAKE_SCORE=2 FAKE_HANG_AT_UNLOAD)
tessera_fake_plugin(slowprobe libtessera-slowprobe-ok ${_f} FAKE_FAMILY="slowprobe" FAKE_SCORE=1 FAKE_DEVICE_PREFIX="Slow")
# A variant whose score writes a line to stdout and one to stderr, then
# returns 0, so that only the probe child runs it (plugin_exit_test.cpp:
# both lines reach the host's stderr, from either kind of probe child).
tessera_fake_plugin(printing libtessera-printing-v ${_f} FAKE_FAMILY="printing" FAKE_DEVICE_PREFIX="Printing"
                    "FAKE_SCORE=((void)!write(1, \"printing: scored, on stdout\\n\", 28), (void)!write(2, \"printing: scored, on stderr\\n\", 28), 0)")

# Variants of family throwing, written in C++, that throw an exception across
# the C ABI from one call made while loading them (above the good one, ok, 1).
set(_t throwing_backend.cpp)
tessera_fake_plugin(throwing libtessera-throwing-score ${_t} FAKE_FAMILY="throwing" FAKE_SCORE=100 THROW_AT=1)
tessera_fake_plugin(throwing libtessera-throwing-init ${_t} FAKE_FAMILY="throwing" FAKE_SCORE=90 THROW_AT=2)
tessera_fake_plugin(throwing libtessera-throwing-regname ${_t} FAKE_FAMILY="throwing" FAKE_SCORE=80 THROW_AT=3)
tessera_fake_plugin(throwing libtessera-throwing-count ${_t} FAKE_FAMILY="throwing" FAKE_SCORE=70 THROW_AT=4)
tessera_fake_plugin(throwing libtessera-throwing-device ${_t} FAKE_FAMILY="throwing" FAKE_SCORE=60 THROW_AT=5)
tessera_fake_plugin(throwing libtessera-throwing-devname ${_t} FAKE_FAMILY="throwing" FAKE_SCORE=50 THROW_AT=6
                    THROW_NON_STD)
tessera_fake_plugin(throwing libtessera-throwing-ok ${_f} FAKE_FAMILY="throwing" FAKE_SCORE=1 FAKE_VARIANT="ok"
                    FAKE_DEVICE_PREFIX="NoThrow")
# A C++ library that loads cleanly, then throws from the call a test names
# (buffer, backend, plan and pool slots; plugin_throw_test.cpp).
tessera_fake_plugin(throwafter libtessera-throwafter ${_t} FAKE_FAMILY="throwafter" THROW_AT=0 THROW_AFTER_LOAD)

set(_backend_test_libs tessera_backend)
if(TARGET tessera_cpu_backend)
  list(APPEND _backend_test_libs tessera_cpu_backend)
endif()
tessera_add_test_area(backend ${_backend_test_libs})
if(TARGET test_backend)
  add_dependencies(test_backend ${_fake_targets})
  if(TARGET tessera-probe)
    add_dependencies(test_backend tessera-probe) # plugin_exit_test.cpp runs the probe helper
  endif()
  target_compile_definitions(test_backend PRIVATE TESSERA_FAKE_PLUGIN_DIR="${TESSERA_FAKE_PLUGIN_DIR}")
  if(TARGET tessera_cpu_backend)
    target_compile_definitions(test_backend PRIVATE TESSERA_HAVE_CPU_BACKEND)
  endif()
endif()

# The huge-page advice of weight buffers switched off (ops/tuning.hpp).
if(TARGET test_backend AND TARGET tessera_cpu_backend)
  add_test(NAME test_backend.huge_pages_off COMMAND test_backend "--gtest_filter=CpuRepack.LargeBuffersAreAdvisedOntoHugePages:CpuCompiledIn.DeviceProperties")
  set_tests_properties(test_backend.huge_pages_off PROPERTIES ENVIRONMENT "TESSERA_CPU_HUGE_PAGES=0")
endif()

# The variant probe run under qemu-x86_64 by cpu_qemu_test.cpp.
if(TARGET test_backend AND TARGET tessera_cpu_backend)
  add_executable(cpu_variant_probe ${CMAKE_CURRENT_LIST_DIR}/programs/cpu_variant_probe.cpp)
  target_link_libraries(cpu_variant_probe PRIVATE tessera_backend GTest::gtest GTest::gtest_main)
  target_include_directories(cpu_variant_probe PRIVATE ${PROJECT_SOURCE_DIR}/src ${CMAKE_CURRENT_SOURCE_DIR})
  add_dependencies(test_backend cpu_variant_probe)
  target_compile_definitions(test_backend PRIVATE TESSERA_PROBE_PATH="$<TARGET_FILE:cpu_variant_probe>")
endif()

# The CPU op tests (tests/backends/cpu/test_ops_*.cpp) once more, computed
# through the registry on loaded variant plugins (registry_shim/): once on
# the best variant for this machine, once on the x64 baseline variant.
file(GLOB _cpu_op_tests CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/tests/backends/cpu/test_ops_*.cpp)
if(_cpu_op_tests AND TARGET tessera_cpu_x64 AND NOT TESSERA_CPU_STATIC)
  add_executable(test_backend_cpu_ops_via_registry ${_cpu_op_tests}
                 ${CMAKE_CURRENT_LIST_DIR}/registry_shim/graph_compute_via_registry.cpp)
  # tessera_cpu_static only for kernel internals some op tests call directly;
  # the shim's graph_compute comes first, so graph_compute.o is not linked.
  target_link_libraries(test_backend_cpu_ops_via_registry PRIVATE tessera_backend tessera_cpu_static
                        GTest::gtest GTest::gtest_main)
  target_include_directories(test_backend_cpu_ops_via_registry PRIVATE ${PROJECT_SOURCE_DIR}/src
                             ${PROJECT_SOURCE_DIR}/tests ${PROJECT_SOURCE_DIR}/tests/backends/cpu)
  target_compile_definitions(test_backend_cpu_ops_via_registry PRIVATE
                             TESSERA_SHARED_DIR="${TESSERA_SHARED_DIR}" TESSERA_BINARY_DIR="${PROJECT_BINARY_DIR}")
  gtest_discover_tests(test_backend_cpu_ops_via_registry TEST_PREFIX "registry_best."
                       DISCOVERY_TIMEOUT 60 PROPERTIES TIMEOUT 600)
  gtest_discover_tests(test_backend_cpu_ops_via_registry TEST_PREFIX "registry_x64."
                       DISCOVERY_TIMEOUT 60 PROPERTIES TIMEOUT 600 ENVIRONMENT TESSERA_TEST_CPU_VARIANT=x64)
  if(TARGET test_backend)
    add_dependencies(test_backend test_backend_cpu_ops_via_registry)
    target_compile_definitions(test_backend PRIVATE
                               TESSERA_OPS_VIA_REGISTRY_PATH="$<TARGET_FILE:test_backend_cpu_ops_via_registry>")
  endif()
endif()

# `tessera devices` end to end (needs the tessera program).
if(TARGET tessera)
  add_executable(test_backend_cli ${CMAKE_CURRENT_LIST_DIR}/cli/devices_cli_test.cpp)
  target_link_libraries(test_backend_cli PRIVATE tessera_test_support GTest::gtest GTest::gtest_main)
  target_compile_definitions(test_backend_cli PRIVATE TESSERA_EXE_PATH="$<TARGET_FILE:tessera>"
                             TESSERA_FAKE_PLUGIN_DIR="${TESSERA_FAKE_PLUGIN_DIR}")
  add_dependencies(test_backend_cli tessera ${_fake_targets})
  gtest_discover_tests(test_backend_cli DISCOVERY_TIMEOUT 60 PROPERTIES TIMEOUT 300)
endif()
