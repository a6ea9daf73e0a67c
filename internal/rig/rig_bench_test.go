package rig

import (
	"context"
	"os"
	"testing"
	"time"
)

// BenchmarkRigStart measures a warm start (binaries cached) of the rig: the control plane alone,
// and the full rig that `berth dev up` and the e2e tests use. Reported as seconds per start.
func BenchmarkRigStart(b *testing.B) {
	if os.Getenv(ToolsDirEnv) == "" {
		b.Skipf("needs %s", ToolsDirEnv)
	}
	types, err := os.ReadFile("../testdata/gpu-instance-types.json")
	if err != nil {
		b.Fatal(err)
	}
	typesFile := b.TempDir() + "/types.json"
	if err := os.WriteFile(typesFile, types, 0o644); err != nil {
		b.Fatal(err)
	}
	for _, full := range []bool{false, true} {
		name := "control-plane"
		if full {
			name = "full"
		}
		b.Run(name, func(b *testing.B) {
			var total time.Duration
			for b.Loop() {
				ctx := context.Background()
				start := time.Now()
				r, err := Start(ctx, Options{WorkDir: b.TempDir()})
				if err != nil {
					b.Fatal(err)
				}
				if full {
					for _, step := range []func() error{
						func() error { return r.StartControllerManager(ctx) },
						func() error { return r.StartScheduler(ctx) },
						func() error { return r.StartKwok(ctx, KwokOptions{}) },
						func() error { return r.StartKarpenter(ctx, KarpenterOptions{InstanceTypesFile: typesFile}) },
						func() error { return r.InstallDevNodePools(ctx) },
					} {
						if err := step(); err != nil {
							_ = r.Stop()
							b.Fatal(err)
						}
					}
				}
				total += time.Since(start)
				b.StopTimer()
				_ = r.Stop()
				b.StartTimer()
			}
			b.ReportMetric(total.Seconds()/float64(b.N), "s/start")
		})
	}
}
