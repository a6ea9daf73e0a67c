package vllmsim

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Profile names: a GPU and a model served by vLLM with its defaults, as a TokenModel.
const (
	// ProfileL4Llama8B is one NVIDIA L4 serving Llama-3.1-8B-Instruct in BF16.
	ProfileL4Llama8B = "l4-llama-3.1-8b"
	// ProfileH100Llama70B is two H100 SXM (tensor parallel 2) serving Llama-3.3-70B-Instruct
	// with FP8 weights.
	ProfileH100Llama70B = "h100x2-llama-3.3-70b-fp8"
)

// Request lengths of the Azure LLM inference trace 2023, conversation service (19,366 requests;
// github.com/Azure/AzurePublicDataset, AzureLLMInferenceDataset2023.md; the Splitwise paper):
// medians of ContextTokens and GeneratedTokens and σ of their logarithms, fitted to its CSV.
const (
	AzureConvPromptMedian     = 1020
	AzureConvPromptSigma      = 0.99
	AzureConvGenerationMedian = 129
	AzureConvGenerationSigma  = 0.86
)

// profiles are the built-in parameter sets. Hardware figures are datasheet values (NVIDIA L4:
// 300 GB/s GDDR6, 121 dense BF16 TFLOPS; H100 SXM: 3.35 TB/s HBM3, 1,979 dense FP8 TFLOPS);
// model figures come from the models' config.json (Llama 3.1 8B: 32 layers, 8 KV heads of 128,
// 8.03 B parameters; Llama 3 70B: 80 layers, 8 KV heads of 128, 70.6 B parameters), so KV per
// token is 2 × layers × 8 × 128 × 2 bytes (BF16 KV cache, vLLM's default); batch limits are
// vLLM V1's defaults for its OpenAI server (vllm/engine/arg_utils.py: 2,048 batched tokens and
// 256 sequences on GPUs under 70 GiB, 8,192 and 1,024 above), block size 16 and
// gpu_memory_utilization 0.9. KV blocks are what is left of 90% of the memory after the
// weights and about 1.2 GiB (L4) or 3 GiB per GPU (H100) of activations and CUDA graphs.
// Efficiencies turn peak figures into achieved ones; the H100's are fitted to NVIDIA's
// published measurement of this setup (docs.nvidia.com/nim/benchmarking/llm: Llama-3.3-70B,
// 2×H100 FP8 TP2, 5,000 prompt and 500 output tokens: TTFT 406.77 ms and ITL 18.58 ms at
// concurrency 1, about 920 output tokens/s at 100 and over), which TestProfilesMatchPublished
// checks; no published vLLM measurement on an L4 was found, so its efficiencies (80% of the
// bandwidth, 50% of the compute) are the H100 fit's, rounded, and its single-stream time per
// token stays above the bandwidth floor of 53.5 ms.
var profiles = map[string]Config{
	ProfileL4Llama8B: {
		Model:            "meta-llama/Llama-3.1-8B-Instruct",
		MaxNumSeqs:       256,
		KVBlocksTotal:    2048, // (0.9 × 22.5 GiB − 14.96 GiB weights − 1.2 GiB) / (16 × 128 KiB)
		Engines:          1,
		PromptTokens:     AzureConvPromptMedian,
		GenerationTokens: AzureConvGenerationMedian,
		Spread:           LengthSpread{Prompt: AzureConvPromptSigma, Generation: AzureConvGenerationSigma},
		Tokens: &TokenModel{
			WeightBytes:         16.06e9,
			KVBytesPerToken:     2 * 32 * 8 * 128 * 2,
			FLOPsPerToken:       2 * 8.03e9,
			Bandwidth:           0.8 * 300e9,
			FLOPS:               0.5 * 121e12,
			StepOverhead:        3 * time.Millisecond,
			MaxNumBatchedTokens: 2048,
			BlockSize:           16,
			MaxModelLen:         8192, // the 128k default does not fit: users set --max-model-len
		},
	},
	ProfileH100Llama70B: {
		Model:            "meta-llama/Llama-3.3-70B-Instruct",
		MaxNumSeqs:       1024,
		KVBlocksTotal:    14500, // 2 × (0.9 × 79.2 GiB − 32.9 GiB weights − 3 GiB) / (16 × 320 KiB)
		Engines:          1,
		PromptTokens:     AzureConvPromptMedian,
		GenerationTokens: AzureConvGenerationMedian,
		Spread:           LengthSpread{Prompt: AzureConvPromptSigma, Generation: AzureConvGenerationSigma},
		Tokens: &TokenModel{
			WeightBytes:         70.6e9,
			KVBytesPerToken:     2 * 80 * 8 * 128 * 2,
			FLOPsPerToken:       2 * 70.6e9,
			Bandwidth:           0.69 * 2 * 3.35e12,
			FLOPS:               0.44 * 2 * 1979e12,
			StepOverhead:        3 * time.Millisecond,
			MaxNumBatchedTokens: 8192,
			BlockSize:           16,
			MaxModelLen:         32768,
		},
	},
}

// ProfileNames lists the built-in profiles, sorted.
func ProfileNames() []string {
	names := make([]string, 0, len(profiles))
	for n := range profiles {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Profile returns the Config of a built-in profile (a copy: changing it changes nothing else).
func Profile(name string) (Config, error) {
	c, ok := profiles[name]
	if !ok {
		return Config{}, fmt.Errorf("vLLM emulator profile %q: want one of %s", name, strings.Join(ProfileNames(), ", "))
	}
	m := *c.Tokens
	c.Tokens = &m
	return c, nil
}
