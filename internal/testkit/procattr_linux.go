package testkit

import "syscall"

// procAttr makes the kernel kill a server when the test process dies, so
// that an interrupted test run leaves no redis-server behind.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
