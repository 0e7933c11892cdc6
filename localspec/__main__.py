from localspec.cli import main

main()
