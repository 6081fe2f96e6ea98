package main

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
)

// listen opens the API listener: a TCP address, or "fd:N", a listening
// socket inherited as file descriptor N (systemd socket activation, or a
// parent that bound the port and keeps it, as the tests' harness does, so
// no other process can take the port between choosing and binding it).
func listen(addr string) (net.Listener, error) {
	fdText, inherited := strings.CutPrefix(addr, "fd:")
	if !inherited {
		return net.Listen("tcp", addr)
	}
	fd, err := strconv.Atoi(fdText)
	if err != nil || fd < 3 {
		return nil, fmt.Errorf("-listen %s: want fd:N with N >= 3 (an inherited socket)", addr)
	}
	f := os.NewFile(uintptr(fd), "listener")
	defer f.Close() // FileListener holds its own copy
	ln, err := net.FileListener(f)
	if err != nil {
		return nil, fmt.Errorf("-listen %s: not a listening socket: %w", addr, err)
	}
	return ln, nil
}
