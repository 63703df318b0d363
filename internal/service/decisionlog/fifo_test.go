//go:build unix

package decisionlog

import "syscall"

const syscallNonblock = syscall.O_NONBLOCK

func mkfifo(path string) error { return syscall.Mkfifo(path, 0o600) }
