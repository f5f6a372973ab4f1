// A C++ test program for `dfsched run` (crates/dfsched-cli/tests/run.rs):
// `threads N` starts N std::threads that spin; prints "pid P", one "tid T"
// per thread, "ready0"; runs until stdin closes, then exits 0.
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>
#include <sys/syscall.h>
#include <unistd.h>

int main(int argc, char **argv) {
    int n = argc > 1 ? std::atoi(argv[1]) : 4;
    std::atomic<bool> stop{false};
    std::atomic<int> started{0};
    std::mutex out;
    {
        std::lock_guard<std::mutex> g(out);
        std::cout << "pid " << getpid() << std::endl;
    }
    std::vector<std::thread> threads;
    for (int i = 0; i < n; i++) {
        threads.emplace_back([&] {
            {
                std::lock_guard<std::mutex> g(out);
                std::cout << "tid " << syscall(SYS_gettid) << std::endl;
            }
            started++;
            while (!stop.load()) {
            }
        });
    }
    while (started.load() < n) {
        std::this_thread::yield();
    }
    {
        std::lock_guard<std::mutex> g(out);
        std::cout << "ready0" << std::endl;
    }
    std::string line;
    while (std::getline(std::cin, line)) {
    }
    stop = true;
    for (auto &t : threads) {
        t.join();
    }
    return 0;
}
