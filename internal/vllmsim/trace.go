package vllmsim

import (
	"bufio"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
)

// TraceRequest is one request of a trace: when it arrives, counted from the trace's start,
// and how many tokens its prompt has and it generates.
type TraceRequest struct {
	// At is the arrival time after the trace's first request.
	At time.Duration
	// Prompt is the prompt (context) tokens; Output the generated tokens.
	Prompt, Output int
}

// azureTimeLayout is the timestamp format of the Azure LLM inference traces
// (AzureLLMInferenceTrace_conv.csv: "2023-11-16 18:15:46.6805900").
const azureTimeLayout = "2006-01-02 15:04:05.999999999"

// ReadAzureTrace reads a request trace in the Azure LLM inference trace format
// (github.com/Azure/AzurePublicDataset, AzureLLMInferenceDataset2023.md): a header
// TIMESTAMP,ContextTokens,GeneratedTokens and one request per line. Timestamps are either
// wall-clock times as Azure publishes them or seconds from the start (what WriteAzureTrace
// writes); requests come back sorted by arrival, timed from the first. Every malformed line
// is reported with its line number; nothing is skipped silently.
func ReadAzureTrace(r io.Reader) ([]TraceRequest, error) {
	cr := csv.NewReader(bufio.NewReader(r))
	cr.FieldsPerRecord = -1
	cr.TrimLeadingSpace = true
	header, err := cr.Read()
	if err != nil {
		return nil, fmt.Errorf("reading the trace header: %w", err)
	}
	cols, err := azureColumns(header)
	if err != nil {
		return nil, err
	}
	var rows []azureRow
	var errs []error
	for line := 2; len(errs) <= 20; line++ {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		var row azureRow
		if err == nil {
			row, err = cols.parse(rec)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("line %d: %w", line, err))
			continue
		}
		if len(rows) > 0 && row.wall.IsZero() != rows[0].wall.IsZero() {
			errs = append(errs, fmt.Errorf("line %d: timestamp %q: wall-clock times and seconds from the start mixed", line, rec[cols.ts]))
			continue
		}
		rows = append(rows, row)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("invalid request trace: %w", err)
	}
	if len(rows) == 0 {
		return nil, errors.New("the request trace has no request")
	}
	return fromRows(rows), nil
}

// azureCols are the columns of the Azure trace's fields.
type azureCols struct{ ts, ctx, gen int }

// azureRow is one parsed line: a wall-clock time (Azure's) or seconds from the start.
type azureRow struct {
	at             time.Duration
	wall           time.Time
	prompt, output int
}

func azureColumns(header []string) (azureCols, error) {
	col := map[string]int{}
	for i, h := range header {
		col[strings.ToLower(strings.TrimSpace(strings.TrimPrefix(h, "\ufeff")))] = i
	}
	ts, okT := col["timestamp"]
	ctx, okC := col["contexttokens"]
	gen, okG := col["generatedtokens"]
	if !okT || !okC || !okG {
		return azureCols{}, fmt.Errorf("trace header %q: want the Azure LLM inference trace columns TIMESTAMP,ContextTokens,GeneratedTokens", strings.Join(header, ","))
	}
	return azureCols{ts, ctx, gen}, nil
}

func (c azureCols) parse(rec []string) (azureRow, error) {
	var row azureRow
	if len(rec) <= max(c.ts, c.ctx, c.gen) {
		return row, fmt.Errorf("%d fields, want at least %d", len(rec), max(c.ts, c.ctx, c.gen)+1)
	}
	stamp := strings.TrimSpace(rec[c.ts])
	if secs, err := strconv.ParseFloat(stamp, 64); err == nil {
		if !(secs >= 0 && secs <= 1e9) {
			return row, fmt.Errorf("timestamp %q: want seconds from the start, at least 0", stamp)
		}
		row.at = time.Duration(secs * float64(time.Second))
	} else if row.wall, err = time.Parse(azureTimeLayout, stamp); err != nil {
		return row, fmt.Errorf("timestamp %q: want %q like Azure's traces, or seconds from the start", stamp, azureTimeLayout)
	}
	var err error
	if row.prompt, err = positive(rec[c.ctx]); err != nil {
		return row, fmt.Errorf("ContextTokens: %w", err)
	}
	if row.output, err = positive(rec[c.gen]); err != nil {
		return row, fmt.Errorf("GeneratedTokens: %w", err)
	}
	return row, nil
}

// fromRows times the rows from the first arrival and sorts them.
func fromRows(rows []azureRow) []TraceRequest {
	if !rows[0].wall.IsZero() {
		first := rows[0].wall
		for _, r := range rows {
			if r.wall.Before(first) {
				first = r.wall
			}
		}
		for i := range rows {
			rows[i].at = rows[i].wall.Sub(first)
		}
	}
	out := make([]TraceRequest, len(rows))
	for i, r := range rows {
		out[i] = TraceRequest{At: r.at, Prompt: r.prompt, Output: r.output}
	}
	slices.SortStableFunc(out, func(a, b TraceRequest) int { return int(a.At - b.At) })
	if base := out[0].At; base > 0 {
		for i := range out {
			out[i].At -= base
		}
	}
	return out
}

// positive parses a whole number of tokens, at least 1.
func positive(s string) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || n < 1 {
		return 0, fmt.Errorf("%q: want a whole number of tokens, at least 1", s)
	}
	return n, nil
}

// WriteAzureTrace writes reqs in the Azure trace format with timestamps in seconds from the
// start (ReadAzureTrace reads them back exactly to the microsecond).
func WriteAzureTrace(w io.Writer, reqs []TraceRequest) error {
	bw := bufio.NewWriter(w)
	if _, err := bw.WriteString("TIMESTAMP,ContextTokens,GeneratedTokens\n"); err != nil {
		return fmt.Errorf("writing the trace: %w", err)
	}
	buf := make([]byte, 0, 64)
	for _, r := range reqs {
		buf = strconv.AppendFloat(buf[:0], r.At.Seconds(), 'f', 6, 64)
		buf = append(buf, ',')
		buf = strconv.AppendInt(buf, int64(r.Prompt), 10)
		buf = append(buf, ',')
		buf = strconv.AppendInt(buf, int64(r.Output), 10)
		buf = append(buf, '\n')
		if _, err := bw.Write(buf); err != nil {
			return fmt.Errorf("writing the trace: %w", err)
		}
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("writing the trace: %w", err)
	}
	return nil
}
