"""What every protocol's demo shares (``manage.py seed_demo``): ``photos`` and ``seeding``; each
protocol's demo study lives in its package (``protocols/<name>/demo.py``)."""
