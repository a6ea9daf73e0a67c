package simulate

import (
	_ "embed"
	"fmt"
	"strings"
	"sync"

	"github.com/berth-dev/berth/internal/vllmsim"
)

// azureConvCSV is the Azure LLM inference trace 2023's conversation hour (CC-BY-4.0,
// © Microsoft; lengths/README.md has its attribution).
//
//go:embed lengths/azure_conv.csv
var azureConvCSV string

// AzureConvLengths is the embedded Azure conversation trace, parsed once: the rows synthetic
// requests take their lengths from by default. Callers must not change it.
var AzureConvLengths = sync.OnceValues(func() ([]vllmsim.TraceRequest, error) {
	t, err := vllmsim.ReadAzureTrace(strings.NewReader(azureConvCSV))
	if err != nil {
		return nil, fmt.Errorf("the embedded Azure conversation trace: %w", err)
	}
	return t, nil
})
