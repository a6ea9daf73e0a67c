package cli

import (
	"fmt"

	"github.com/spf13/pflag"
	"go.uber.org/zap/zapcore"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

// logFlags are the logging flags of the long-running commands (controller, scaler, agent).
type logFlags struct {
	// level is debug, info, warn or error.
	level string
	// development prints human-readable console lines instead of JSON.
	development bool
}

// bind adds --log-level and --development.
func (l *logFlags) bind(fl *pflag.FlagSet) {
	fl.StringVar(&l.level, "log-level", "info", "least severe log level written: debug, info, warn or error")
	fl.BoolVar(&l.development, "development", false, "human-readable console logs instead of JSON")
}

// setup installs the process logger, or says what is wrong with --log-level.
func (l logFlags) setup() error {
	lvl, err := zapcore.ParseLevel(l.level)
	if err != nil || l.level == "" || lvl < zapcore.DebugLevel || lvl > zapcore.ErrorLevel {
		return fmt.Errorf("--log-level %q: want debug, info, warn or error", l.level)
	}
	ctrl.SetLogger(zap.New(zap.UseDevMode(l.development), zap.Level(lvl)))
	return nil
}
