package rigtest

import (
	"context"
	"testing"
	"time"
)

// Eventually polls cond every interval until it reports done, fails the test when cond returns
// an error or when timeout passes, and then reports the last status cond gave.
func Eventually(t testing.TB, timeout, interval time.Duration, what string, cond func(ctx context.Context) (done bool, status string, err error)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var status string
	for {
		done, s, err := cond(ctx)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		status = s
		if done {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: not done after %s; last status: %s", what, timeout, status)
		case <-time.After(interval):
		}
	}
}
