package rlock_test

import "runtime"

func runtimeGoroutines() int { return runtime.NumGoroutine() }
