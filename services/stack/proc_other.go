//go:build unix && !linux

package main

import "syscall"

// childAttr puts a service in its own process group, so a Ctrl-C in the
// terminal reaches the stack alone and the stack stops the services in order.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
