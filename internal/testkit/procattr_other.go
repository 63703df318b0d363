//go:build !linux

package testkit

import "syscall"

func procAttr() *syscall.SysProcAttr { return nil }
