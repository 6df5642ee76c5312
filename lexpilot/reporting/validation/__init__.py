"""The validation kits: judge agreement with experts (Table 12), the probe study (Table 13), two judges on the same generations."""
