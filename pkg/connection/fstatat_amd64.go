//go:build linux

package connection

import "syscall"

// sysFstatat is fstatat(2), the call syscall.Stat makes.
const sysFstatat = syscall.SYS_NEWFSTATAT
