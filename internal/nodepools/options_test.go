package nodepools

import (
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	cases := []struct {
		name string
		opts Options
		// wantErr are substrings of the error; none means valid.
		wantErr []string
	}{
		{name: "defaults", opts: Options{Families: []string{"h100"}, ClusterName: "prod"}},
		{name: "EC2 family names", opts: Options{Families: []string{"p5", "p5e", "p4d", "g6e", "g5", "g6"}, ClusterName: "prod"}},
		{name: "all", opts: Options{Families: []string{"all"}, Role: RoleTraining, ClusterName: "prod"}},
		{name: "kwok needs no cluster", opts: Options{Families: []string{"l4"}, Provider: ProviderKwok}},
		{name: "capacity override", opts: Options{Families: []string{"l4"}, CapacityTypes: []string{"spot"}, ClusterName: "prod"}},
		{name: "DRA pools", opts: Options{Families: []string{"h100", "l4"}, ClusterName: "prod", DRA: true, AMIAlias: "al2023@v20251117"}},
		{name: "DRA pools on Bottlerocket", opts: Options{Families: []string{"h100"}, ClusterName: "prod", DRA: true, AMIAlias: "bottlerocket@latest"},
			wantErr: []string{`DRA pools cannot use the AMI alias "bottlerocket@latest"`, "device plugin", "al2023"}},
		{name: "no family", opts: Options{ClusterName: "prod"}, wantErr: []string{"no GPU family", "h100 (p5)"}},
		{name: "unknown family", opts: Options{Families: []string{"h100", "b200"}, ClusterName: "prod"},
			wantErr: []string{`unknown GPU family "b200"`, "a10g (g5)", "h200 (p5e)", "l4 (g6)", "all"}},
		{name: "CPU family", opts: Options{Families: []string{"m5"}, ClusterName: "prod"}, wantErr: []string{`unknown GPU family "m5"`}},
		{name: "bad role", opts: Options{Families: []string{"h100"}, Role: "serving", ClusterName: "prod"},
			wantErr: []string{`unknown role "serving"`, "inference, training"}},
		{name: "bad provider", opts: Options{Families: []string{"h100"}, Provider: "gcp", ClusterName: "prod"},
			wantErr: []string{`unknown provider "gcp"`, "aws, kwok"}},
		{name: "bad capacity type", opts: Options{Families: []string{"h100"}, CapacityTypes: []string{"spot", "preemptible"}, ClusterName: "prod"},
			wantErr: []string{`unknown capacity type "preemptible"`, "spot, on-demand"}},
		{name: "reserved capacity without reservations", opts: Options{Families: []string{"h100"}, CapacityTypes: []string{"reserved"}, ClusterName: "prod"},
			wantErr: []string{`"reserved" needs capacity reservations`}},
		{name: "reservations without reserved capacity", opts: Options{Families: []string{"h100"}, CapacityReservationIDs: []string{"cr-0abc"}, ClusterName: "prod"},
			wantErr: []string{`lack "reserved"`}},
		{name: "a Capacity Block by id, on-demand as fallback", opts: Options{Families: []string{"h100"}, Role: RoleTraining, CapacityTypes: []string{"reserved", "on-demand"},
			CapacityReservationIDs: []string{"cr-0123456789abcdef0"}, ClusterName: "prod"}},
		{name: "reservations by tag", opts: Options{Families: []string{"h100"}, CapacityTypes: []string{"reserved"}, CapacityReservationTags: map[string]string{"team": "ml"}, ClusterName: "prod"}},
		{name: "bad reservation id", opts: Options{Families: []string{"h100"}, CapacityTypes: []string{"reserved"}, CapacityReservationIDs: []string{"odcr-1"}, ClusterName: "prod"},
			wantErr: []string{`invalid capacity reservation id "odcr-1"`}},
		{name: "own node role and discovery tags need no cluster name", opts: Options{Families: []string{"l4"}, NodeRole: "eks-gpu-nodes", DiscoveryTags: map[string]string{"kubernetes.io/cluster/prod": "owned"}}},
		{name: "bad node role", opts: Options{Families: []string{"l4"}, NodeRole: "role with spaces", ClusterName: "prod"}, wantErr: []string{`invalid node role "role with spaces"`}},
		{name: "a long cluster name with its own node role", opts: Options{Families: []string{"h100"}, ClusterName: strings.Repeat("c", 47), NodeRole: "gpu-nodes"}},
		{name: "negative GPU limit", opts: Options{Families: []string{"h100"}, GPULimit: -1, ClusterName: "prod"}, wantErr: []string{"GPU limit -1"}},
		{name: "aws without cluster", opts: Options{Families: []string{"h100"}}, wantErr: []string{"needs a cluster name"}},
		{name: "bad cluster name", opts: Options{Families: []string{"h100"}, ClusterName: "my cluster"}, wantErr: []string{`invalid cluster name "my cluster"`}},
		{name: "pinned AMI", opts: Options{Families: []string{"h100"}, ClusterName: "prod", AMIAlias: "al2023@v20251117"}},
		{name: "bad AMI alias", opts: Options{Families: []string{"h100"}, ClusterName: "prod", AMIAlias: "ami-0123456789abcdef0"},
			wantErr: []string{`invalid AMI alias "ami-0123456789abcdef0"`, "al2023@v20251117"}},
		{name: "cluster name too long", opts: Options{Families: []string{"h100"}, ClusterName: strings.Repeat("c", 47)}, wantErr: []string{"too long"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.opts.Validate()
			if len(c.wantErr) == 0 {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				if _, err := Render(c.opts); err != nil {
					t.Fatalf("Render: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate: no error, want one containing %q", c.wantErr)
			}
			for _, w := range c.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			if _, rerr := Render(c.opts); rerr == nil || rerr.Error() != err.Error() {
				t.Errorf("Render error = %v, want the Validate error", rerr)
			}
		})
	}
}

func TestFamiliesDedupe(t *testing.T) {
	fams, err := Options{Families: []string{"h100", "P5", " g6 ", "l4"}}.families()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range fams {
		got = append(got, f.Name)
	}
	if strings.Join(got, ",") != "p5,g6" {
		t.Errorf("families = %v, want [p5 g6]", got)
	}
}
