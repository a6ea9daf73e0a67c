package rig

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

// installSignalHandler stops every live rig on SIGINT, SIGTERM or SIGHUP and then exits with the
// conventional 128+signal status, so Ctrl-C in `go test` or `berth dev` leaves nothing running.
func installSignalHandler(stopAll func()) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	go func() {
		sig := <-ch
		fmt.Fprintf(os.Stderr, "rig: %v received, stopping all components\n", sig)
		stopAll()
		code := 1
		if s, ok := sig.(syscall.Signal); ok {
			code = 128 + int(s)
		}
		os.Exit(code)
	}()
}
