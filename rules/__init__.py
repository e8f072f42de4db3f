"""The op rules, one module per family. Importing this package registers them all."""
