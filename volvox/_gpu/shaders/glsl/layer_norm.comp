#version 430
layout(local_size_x = 64, local_size_y = 1, local_size_z = 1) in;

struct _5
{
    uint _m0;
    uint _m1;
    float _m2;
    uint _m3;
};

layout(binding = 0, std430) readonly buffer _11_10
{
    float _m0[];
} _10;

layout(binding = 1, std430) readonly buffer _14_13
{
    float _m0[];
} _13;

layout(binding = 2, std430) readonly buffer _17_16
{
    float _m0[];
} _16;

layout(binding = 3, std430) buffer _20_19
{
    float _m0[];
} _19;

layout(binding = 4, std430) readonly buffer _23_22
{
    _5 _m0;
} _22;

shared float _25[64];

void main()
{
    float _57 = 0.0;
    uint _60 = 32u;
    float _63 = 0.0;
    float _51 = 0.0;
    uint _56 = 32u;
    uvec2 _91 = uvec2(4294967295u);
    uvec2 _128 = uvec2(4294967295u);
    uvec2 _169 = uvec2(4294967295u);
    uvec2 _204 = uvec2(4294967295u);
    uvec2 _250 = uvec2(4294967295u);
    uint _70 = (gl_WorkGroupID.y * gl_NumWorkGroups.x) + gl_WorkGroupID.x;
    if (_70 >= _22._m0._m0)
    {
        return;
    }
    uint _79 = _22._m0._m1;
    uint _80 = _70 * _79;
    uint _53 = gl_LocalInvocationIndex;
    for (;;)
    {
        if (all(equal(uvec2(0u), _91)))
        {
            break;
        }
        _91 -= uvec2(uint(_91.y == 0u), 1u);
        if (!(_53 < _22._m0._m1))
        {
            break;
        }
        _51 += _10._m0[_80 + _53];
        _53 += 64u;
        continue;
    }
    _25[gl_LocalInvocationIndex] = _51;
    barrier();
    for (;;)
    {
        if (all(equal(uvec2(0u), _128)))
        {
            break;
        }
        _128 -= uvec2(uint(_128.y == 0u), 1u);
        if (!(_56 > 0u))
        {
            break;
        }
        if (gl_LocalInvocationIndex < _56)
        {
            _25[gl_LocalInvocationIndex] += _25[gl_LocalInvocationIndex + _56];
        }
        barrier();
        _56 = _56 >> 1u;
        continue;
    }
    float _160 = _25[0u];
    uint _162 = _22._m0._m1;
    float _164 = _160 / float(_162);
    barrier();
    uint _58 = gl_LocalInvocationIndex;
    for (;;)
    {
        if (all(equal(uvec2(0u), _169)))
        {
            break;
        }
        _169 -= uvec2(uint(_169.y == 0u), 1u);
        if (!(_58 < _22._m0._m1))
        {
            break;
        }
        float _192 = _10._m0[_80 + _58] - _164;
        _57 += (_192 * _192);
        _58 += 64u;
        continue;
    }
    _25[gl_LocalInvocationIndex] = _57;
    barrier();
    for (;;)
    {
        if (all(equal(uvec2(0u), _204)))
        {
            break;
        }
        _204 -= uvec2(uint(_204.y == 0u), 1u);
        if (!(_60 > 0u))
        {
            break;
        }
        if (gl_LocalInvocationIndex < _60)
        {
            _25[gl_LocalInvocationIndex] += _25[gl_LocalInvocationIndex + _60];
        }
        barrier();
        _60 = _60 >> 1u;
        continue;
    }
    float _245 = 1.0 / sqrt((_25[0u] / float(_22._m0._m1)) + _22._m0._m2);
    uint _61 = gl_LocalInvocationIndex;
    for (;;)
    {
        if (all(equal(uvec2(0u), _250)))
        {
            break;
        }
        _250 -= uvec2(uint(_250.y == 0u), 1u);
        if (!(_61 < _22._m0._m1))
        {
            break;
        }
        _63 = ((_10._m0[_80 + _61] - _164) * _245) * _13._m0[_61];
        if (_22._m0._m3 != 0u)
        {
            _63 += _16._m0[_61];
        }
        _19._m0[_80 + _61] = _63;
        _61 += 64u;
        continue;
    }
}

