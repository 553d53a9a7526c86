// tests/backend/watchdog.hpp — ends the test program with a message when a
// scope takes far longer than it ever should (a hang guard, not a timing
// assertion: the limit is minutes, the work milliseconds).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>

namespace tessera::test {

class watchdog {
public:
    watchdog(std::chrono::seconds limit, std::string what)
        : what_(std::move(what)), thread_([this, limit] {
              std::unique_lock lk(mu_);
              if (!cv_.wait_for(lk, limit, [this] { return done_; })) {
                  std::fprintf(stderr, "watchdog: '%s' still running after %lld s: hung\n",
                               what_.c_str(), static_cast<long long>(limit.count()));
                  std::abort();
              }
          }) {}
    ~watchdog() {
        {
            std::lock_guard lk(mu_);
            done_ = true;
        }
        cv_.notify_one();
        thread_.join();
    }

private:
    std::string what_;
    std::mutex mu_;
    std::condition_variable cv_;
    bool done_ = false;
    std::thread thread_;
};

} // namespace tessera::test
