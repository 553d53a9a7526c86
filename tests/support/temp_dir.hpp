// tests/support/temp_dir.hpp — a fresh, empty directory for one test,
// removed with everything in it when the object goes out of scope:
// <system temp>/tessera_<prefix>_<test suite>_<test>_<pid> (the current
// GoogleTest test's names, so parallel test processes never share one).
#pragma once

#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <iterator>
#include <string>
#include <string_view>

namespace tessera::test {

struct temp_dir {
    std::filesystem::path path;

    explicit temp_dir(std::string_view prefix = "test") {
        const auto * info = ::testing::UnitTest::GetInstance()->current_test_info();
        std::string name = "tessera_" + std::string(prefix);
        if (info != nullptr) name += std::string("_") + info->test_suite_name() + "_" + info->name();
        path = std::filesystem::temp_directory_path() / (name + "_" + std::to_string(::getpid()));
        std::filesystem::remove_all(path);
        std::filesystem::create_directories(path);
    }
    ~temp_dir() {
        std::error_code ec;
        std::filesystem::remove_all(path, ec);
    }
    temp_dir(const temp_dir &) = delete;
    temp_dir & operator=(const temp_dir &) = delete;

    std::filesystem::path operator/(const std::string & name) const { return path / name; }
    // Entries directly inside the directory.
    size_t n_entries() const {
        return static_cast<size_t>(std::distance(std::filesystem::directory_iterator(path), std::filesystem::directory_iterator()));
    }
};

} // namespace tessera::test
