// SPDX-License-Identifier: Apache-2.0
/// @file
/// An MPS client's GPU work drained before SIGTERM or SIGINT ends it. Measured on an H200
/// (docs/results/mps-faults.md): a client that ends while one of its kernels has run for 300 ms
/// or more makes the MPS server reset the GPU, and every other client of that server, the
/// production job among them, fails with "an illegal memory access"; a client ended with short
/// kernels queued does no harm. SIGTERM is how a job is normally ended (Kubernetes, Slurm, a
/// user's kill), so a registered MPS client that leaves SIGTERM and SIGINT at their default
/// action gets a handler: it holds the job's further launches, waits for the work already on
/// the GPU (at most `drain_limit`), and then ends the process by the same signal, as the default
/// action would have. SIGKILL cannot be caught: the operator guide says so.
#pragma once

#include <atomic>
#include <chrono>

namespace tgs::cuda::intercept {

/// Set from the signal handler: a launch from now on waits for the end (`hold_for_exit`).
extern std::atomic<bool> exit_draining;

/// The longest wait for the GPU's work before the process ends anyway: within Kubernetes'
/// default 30 s grace period, so the drain ends before the kubelet's SIGKILL would.
inline constexpr std::chrono::seconds drain_limit{20};

/// Installs the handler for SIGTERM and SIGINT where the job left them at their default action
/// (a job's own handler is its own business), once per process. Called once this process is an
/// MPS client of the node's daemon.
void install_exit_drain() noexcept;

/// A launch made while the process drains: it never reaches the GPU, the thread waits for the
/// process to end.
[[noreturn]] void hold_for_exit() noexcept;

}  // namespace tgs::cuda::intercept
