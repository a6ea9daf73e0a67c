package cli

import (
	"strings"
	"testing"
)

func TestLogLevel(t *testing.T) {
	for _, ok := range []string{"debug", "info", "warn", "error", "INFO"} {
		if err := (logFlags{level: ok}).setup(); err != nil {
			t.Errorf("--log-level %s: %v", ok, err)
		}
	}
	for _, bad := range []string{"verbose", "", "fatal", "dpanic", "2"} {
		err := (logFlags{level: bad}).setup()
		if err == nil || !strings.Contains(err.Error(), "want debug, info, warn or error") {
			t.Errorf("--log-level %q: error %v, want one naming the accepted levels", bad, err)
		}
	}
}
