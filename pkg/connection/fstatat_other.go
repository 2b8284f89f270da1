//go:build !linux || !(amd64 || arm64)

package connection

// sysFstatat is 0 where syscall.Stat is not a plain fstatat(2) (or its
// number is not known here): FolderSource then calls syscall.Stat.
const sysFstatat = 0
